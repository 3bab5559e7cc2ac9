// nn::chain, nn::residual, nn::branches and nn::recomputed under every
// executor: fp32 forward and backward against fp64 references on the host —
// plain sequential networks of the same layers, joined by hand (the chain
// itself, y = x + f(x), sums and concatenations), and nested composites
// against themselves in fp64 (whose gradients test_composition_gradients.cpp
// checks by central differences); bf16 close to fp32; parameter names through
// nesting; an embedding first in a chain; recomputation bit for bit equal to
// keeping the activations, and the memory it saves.
#include <cstring>
#include <string>
#include <vector>

#include <fusor/nn/branches.hpp>
#include <fusor/nn/chain.hpp>
#include <fusor/nn/dropout.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/recompute.hpp>
#include <fusor/nn/residual.hpp>

#include "nn/swiglu_layer.hpp"
#include "nn/test_composition_support.hpp"

using namespace composition_test;

namespace {
constexpr index_t batch = 5;

struct pass_result {
  values y, dx;
  std::map<std::string, parameter_record> parameters;
};

// Random inputs that fp32 holds exactly, so fp32 and fp64 networks see the same.
values random_values(std::size_t n, std::uint32_t seed) {
  values stored;
  random_host<fp32>(dextents<index_t, 1>(index_t(n)), seed, stored);
  return stored;
}

// One forward (x) and backward (dy) of `net` under `ex`: y, dx and every parameter.
template <class Net, class Executor>
pass_result run(Net& net, const values& x, const values& dy, const Executor& ex, const nn::run_mode& mode = nn::training) {
  using P = typename Net::input_precision;
  using E = typename Net::input_features::batched_extents;
  using S = typename Net::space;
  const index_t n = index_t(x.size()) / Net::input_features::size;
  host_tensor<P, E> x_host{E(n)};
  for (index_t i = 0; i < x_host.size(); ++i) x_host.data()[i] = convert<storage_t<P>>(x[std::size_t(i)]);
  tensor<P, E, row_major, S> x_space{E(n)}, dx_space{E(n)};
  copy(x_space, x_host);
  poison(dx_space);
  pass_result r;
  r.y = as_doubles(net.forward(x_space, ex, mode));
  const auto g = net.output_gradient();
  host_tensor<typename Net::output_precision, typename Net::output_features::batched_extents> dy_host(g.extents());
  for (index_t i = 0; i < dy_host.size(); ++i) dy_host.data()[i] = convert<storage_t<typename Net::output_precision>>(dy[std::size_t(i)]);
  copy(g, dy_host);
  net.backward(ex, typename Net::input_view(dx_space.data(), n));
  r.dx = as_doubles(dx_space);
  r.parameters = parameters_of(net);
  return r;
}

template <class Seq>
using tested = nn::network<Seq, fp32, space>;
template <class Seq>
using reference = nn::network<Seq, double, host_space>;

template <class Seq>
values inputs(std::uint32_t seed) {
  return random_values(std::size_t(batch * Seq::input_features::size), seed);
}
template <class Seq>
values output_gradients(std::uint32_t seed) {
  return random_values(std::size_t(batch * Seq::output_features::size), seed);
}

// Every parameter gradient of `got` against the reference's under the name one level out.
void check_gradients_against(const pass_result& got, const std::map<std::string, parameter_record>& want,
                             const std::string& prefix, double tolerance) {
  int compared = 0;
  for (const auto& [name, record] : got.parameters) {
    if (!name.starts_with(prefix)) continue;
    check_close(record.gradient, want.at(name.substr(prefix.size())).gradient, tolerance, "gradient of " + name);
    ++compared;
  }
  CHECK(compared == int(want.size()));
}

// A composite network in fp32 against itself in fp64 on the host (same parameters).
template <class Seq>
void check_against_fp64(double tolerance, std::uint32_t seed) {
  tested<Seq> net(batch, {.seed = seed});
  reference<Seq> ref(batch, {.seed = seed + 1});
  set_parameters(ref, parameters_of(net));
  const values x = inputs<Seq>(seed + 2), dy = output_gradients<Seq>(seed + 3);
  const pass_result got = run(net, x, dy, executor{}), want = run(ref, x, dy, host_executor{});
  check_close(got.y, want.y, tolerance, "y");
  check_close(got.dx, want.dx, tolerance, "dx");
  check_gradients_against(got, want.parameters, "", tolerance);
}

using mlp_block = nn::residual<nn::linear<6, 10, nn::tanh_activation>, nn::linear<10, 6>>;
using token_block = nn::residual<nn::layernorm<8>, example::swiglu<8, 12>>;
constexpr double fp32_tolerance = 2e-5;
}  // namespace

FUSOR_TEST_CASE("chain: fp32 forward and backward equal the sequential network of its layers in fp64") {
  using layers = nn::chain<nn::linear<6, 9, nn::gelu_tanh>, nn::layernorm<9>, nn::linear<9, 4>>;
  using composite = nn::sequential<nn::features<6>, layers>;
  tested<composite> net(batch, {.seed = 1});
  reference<nn::sequential<nn::features<6>, nn::linear<6, 9, nn::gelu_tanh>, nn::layernorm<9>, nn::linear<9, 4>>> ref(batch, {.seed = 2});
  set_parameters(ref, parameters_of(net), [](const std::string& n) { return "0." + n; });
  const values x = inputs<composite>(3), dy = output_gradients<composite>(4);
  const pass_result got = run(net, x, dy, executor{}), want = run(ref, x, dy, host_executor{});
  check_close(got.y, want.y, fp32_tolerance, "y");
  check_close(got.dx, want.dx, fp32_tolerance, "dx");
  check_gradients_against(got, want.parameters, "0.", fp32_tolerance);
}

FUSOR_TEST_CASE("residual: y = x + f(x) and dx = dy + f'(x) dy against the sequential network of f in fp64") {
  using composite = nn::sequential<nn::features<6>, mlp_block>;
  tested<composite> net(batch, {.seed = 5});
  reference<nn::sequential<nn::features<6>, nn::linear<6, 10, nn::tanh_activation>, nn::linear<10, 6>>> f(batch, {.seed = 6});
  set_parameters(f, parameters_of(net), [](const std::string& n) { return "0." + n; });
  const values x = inputs<composite>(7), dy = output_gradients<composite>(8);
  const pass_result got = run(net, x, dy, executor{}), want = run(f, x, dy, host_executor{});
  values y = want.y, dx = want.dx;
  for (std::size_t i = 0; i < y.size(); ++i) {
    y[i] += x[i];
    dx[i] += dy[i];
  }
  check_close(got.y, y, fp32_tolerance, "y");
  check_close(got.dx, dx, fp32_tolerance, "dx");
  check_gradients_against(got, want.parameters, "0.", fp32_tolerance);
}

FUSOR_TEST_CASE("branches: added and concatenated against the branches as sequential networks in fp64") {
  using first = nn::sequential<nn::features<5>, nn::linear<5, 8, nn::relu>, nn::linear<8, 4>>;
  using second = nn::sequential<nn::features<5>, nn::linear<5, 4, nn::sigmoid_activation>>;
  const auto prefix = [](int branch) {
    return [branch](const std::string& n) { return std::to_string(branch) + "." + n; };
  };
  SUBCASE("join_add") {
    using composite = nn::sequential<nn::features<5>, nn::branches<nn::join_add, nn::chain<nn::linear<5, 8, nn::relu>, nn::linear<8, 4>>,
                                                                   nn::linear<5, 4, nn::sigmoid_activation>>>;
    tested<composite> net(batch, {.seed = 9});
    reference<first> f(batch, {.seed = 10});
    reference<second> g(batch, {.seed = 11});
    const auto parameters = parameters_of(net);
    set_parameters(f, parameters, [&](const std::string& n) { return "0." + prefix(0)(n); });
    set_parameters(g, parameters, [&](const std::string& n) { return "0." + prefix(1)(n); });
    const values x = inputs<composite>(12), dy = output_gradients<composite>(13);
    const pass_result got = run(net, x, dy, executor{}), want_f = run(f, x, dy, host_executor{}),
                      want_g = run(g, x, dy, host_executor{});
    values y = want_f.y, dx = want_f.dx;
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += want_g.y[i];
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += want_g.dx[i];
    check_close(got.y, y, fp32_tolerance, "y");
    check_close(got.dx, dx, fp32_tolerance, "dx");
    check_gradients_against(got, want_f.parameters, "0.0.", fp32_tolerance);
    check_gradients_against(got, want_g.parameters, "0.1.", fp32_tolerance);
  }
  SUBCASE("join_concat, per position: [3, 6] and [3, 6] give [3, 12]") {
    using left = nn::sequential<nn::features<3, 6>, nn::layernorm<6>>;
    using right = nn::sequential<nn::features<3, 6>, nn::tanh_activation, nn::layernorm<6>>;
    using composite = nn::sequential<nn::features<3, 6>, nn::branches<nn::join_concat, nn::layernorm<6>,
                                                                      nn::chain<nn::tanh_activation, nn::layernorm<6>>>>;
    static_assert(std::is_same_v<composite::output_features, nn::features<3, 12>>);
    tested<composite> net(batch, {.seed = 14});
    // weight and bias away from 1 and 0.
    std::map<std::string, parameter_record> parameters;
    std::uint32_t seed = 15;
    for (const std::string& name : parameter_names(net)) parameters[name].data = random_values(6, seed++);
    set_parameters(net, parameters);
    reference<left> f(batch, {.seed = 16});
    reference<right> g(batch, {.seed = 17});
    set_parameters(f, parameters, [&](const std::string& n) { return "0." + prefix(0)(n); });
    set_parameters(g, parameters, [&](const std::string& n) { return "0." + prefix(1)(n); });
    const values x = inputs<composite>(18), dy = output_gradients<composite>(19);
    values dy_f, dy_g;  // each branch's columns of dy
    for (std::size_t row = 0; row < dy.size() / 12; ++row)
      for (std::size_t j = 0; j < 12; ++j) (j < 6 ? dy_f : dy_g).push_back(dy[row * 12 + j]);
    const pass_result got = run(net, x, dy, executor{}), want_f = run(f, x, dy_f, host_executor{}),
                      want_g = run(g, x, dy_g, host_executor{});
    values y, dx = want_f.dx;
    for (std::size_t row = 0; row < x.size() / 6; ++row) {
      y.insert(y.end(), want_f.y.begin() + std::ptrdiff_t(row * 6), want_f.y.begin() + std::ptrdiff_t(row * 6 + 6));
      y.insert(y.end(), want_g.y.begin() + std::ptrdiff_t(row * 6), want_g.y.begin() + std::ptrdiff_t(row * 6 + 6));
    }
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += want_g.dx[i];
    check_close(got.y, y, fp32_tolerance, "y");
    check_close(got.dx, dx, fp32_tolerance, "dx");
    check_gradients_against(got, want_f.parameters, "0.0.", fp32_tolerance);
    check_gradients_against(got, want_g.parameters, "0.1.", fp32_tolerance);
  }
}

FUSOR_TEST_CASE("nested composites and SwiGLU blocks: fp32 against fp64, forward and backward") {
  using inner = nn::residual<nn::layernorm<6>, nn::branches<nn::join_concat, nn::linear<6, 2, nn::tanh_activation>, nn::linear<6, 4>>>;
  using outer = nn::branches<nn::join_add, nn::chain<inner, nn::linear<6, 3>>,
                             nn::chain<nn::linear<6, 3>, nn::residual<nn::linear<3, 3, nn::relu>>>>;
  check_against_fp64<nn::sequential<nn::features<6>, nn::linear<6, 6>, outer, nn::linear<3, 2>>>(fp32_tolerance, 21);
  check_against_fp64<nn::sequential<nn::features<4, 8>, token_block, nn::chain<token_block, nn::recomputed<token_block>>>>(
      fp32_tolerance, 22);
}

FUSOR_TEST_CASE("composites: bf16 forward close to fp32") {
  using seq = nn::sequential<nn::features<4, 16>, nn::residual<nn::layernorm<16>, example::swiglu<16, 24>>,
                             nn::branches<nn::join_concat, nn::layernorm<16>, nn::residual<nn::layernorm<16>, nn::tanh_activation>>,
                             nn::flatten, nn::linear<128, 32, nn::gelu_tanh>, nn::residual<nn::linear<32, 32>>, nn::linear<32, 8>>;
  nn::network<seq, fp32, space> full(batch, {.seed = 23});
  nn::network<seq, bf16, space> half(batch, {.seed = 24});
  set_parameters(half, parameters_of(full));
  const values x = inputs<seq>(25), dy = output_gradients<seq>(26);
  const pass_result want = run(full, x, dy, executor{}), got = run(half, x, dy, executor{});
  double worst = 0;
  for (std::size_t i = 0; i < want.y.size(); ++i)
    worst = std::max(worst, std::fabs(got.y[i] - want.y[i]) / std::max(1.0, std::fabs(want.y[i])));
  INFO("largest difference of bf16 from fp32: " << worst);
  CHECK(worst < 5e-2);
  check_close(got.y, want.y, 5e-2, "y");
}

FUSOR_TEST_CASE("composites: parameters named as PyTorch's nested nn.Sequential, each layer's range found") {
  using seq = nn::sequential<nn::features<6>, nn::linear<6, 6>, mlp_block,
                             nn::branches<nn::join_concat, nn::linear<6, 2>, nn::chain<nn::linear<6, 3>, nn::layernorm<3>>>,
                             nn::recomputed<nn::residual<nn::linear<5, 5>, nn::chain<nn::layernorm<5>, nn::linear<5, 5>>>>>;
  tested<seq> net(batch, {.seed = 27});
  const std::vector<std::string> names = parameter_names(net);
  const std::vector<std::string> expected = {
      "0.weight",     "0.bias",       "1.0.weight",   "1.0.bias",     "1.1.weight",     "1.1.bias",
      "2.0.0.weight", "2.0.0.bias",   "2.1.0.weight", "2.1.0.bias",   "2.1.1.weight",   "2.1.1.bias",
      "3.0.weight",   "3.0.bias",     "3.1.0.weight", "3.1.0.bias",   "3.1.1.weight",   "3.1.1.bias"};
  CHECK(names == expected);
  // Network layer 2 holds its six parameters back to back.
  const auto [begin, end] = net.parameter_range<float>(2);
  const auto& slots = net.group<float>().slots();
  CHECK(begin == slots[6].offset);
  CHECK(end >= slots[11].offset + slots[11].size);
  CHECK(end <= slots[12].offset);

  // recomputed adds no level, inside a branch too: a recomputed chain names its parameters as the chain.
  using branch_chain = nn::chain<nn::linear<6, 3>, nn::layernorm<3>>;
  using plain = nn::sequential<nn::features<6>, nn::branches<nn::join_concat, nn::linear<6, 2>, branch_chain>>;
  using recomputed = nn::sequential<nn::features<6>, nn::branches<nn::join_concat, nn::recomputed<nn::linear<6, 2>>,
                                                                  nn::recomputed<branch_chain>>>;
  tested<plain> plain_net(batch, {.seed = 27});
  tested<recomputed> recomputed_net(batch, {.seed = 27});
  CHECK(parameter_names(recomputed_net) == parameter_names(plain_net));
  CHECK(parameter_names(plain_net) ==
        std::vector<std::string>{"0.0.0.weight", "0.0.0.bias", "0.1.0.weight", "0.1.0.bias", "0.1.1.weight",
                                 "0.1.1.bias"});
}

FUSOR_TEST_CASE("chain: an embedding first takes int32 ids, as the same layers unchained") {
  using chained = nn::sequential<nn::features<6>, nn::chain<nn::embedding<11, 4>, nn::layernorm<4>>, nn::flatten, nn::linear<24, 3>>;
  using plain = nn::sequential<nn::features<6>, nn::embedding<11, 4>, nn::layernorm<4>, nn::flatten, nn::linear<24, 3>>;
  static_assert(std::is_same_v<tested<chained>::input_precision, std::int32_t>);
  tested<chained> net(batch, {.seed = 28});
  tested<plain> ref(batch, {.seed = 29});
  set_parameters(ref, parameters_of(net), [](const std::string& n) {
    const std::string outer = n.substr(0, n.find('.'));
    return outer == "0" || outer == "1" ? "0." + n : std::to_string(std::stoi(outer) - 1) + n.substr(n.find('.'));
  });
  using ids_t = host_tensor<std::int32_t, extents<index_t, dynamic, 6>>;
  ids_t ids(batch);
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t((i * 7 + 3) % 11);
  const auto ids_space = to_space(ids);
  executor ex{};
  const values got = as_doubles(net.forward(ids_space, ex)), want = as_doubles(ref.forward(ids_space, ex));
  check_close(got, want, 1e-6, "y");
  const values dy = output_gradients<plain>(30);
  host_tensor<fp32, extents<index_t, dynamic, 3>> dy_host(batch);
  for (index_t i = 0; i < dy_host.size(); ++i) dy_host.data()[i] = float(dy[std::size_t(i)]);
  copy(net.output_gradient(), dy_host);
  copy(ref.output_gradient(), dy_host);
  net.backward(ex);
  ref.backward(ex);
  const auto a = parameters_of(net), b = parameters_of(ref);
  check_close(a.at("0.0.weight").gradient, b.at("0.weight").gradient, 1e-6, "embedding table gradient");
  check_close(a.at("0.1.weight").gradient, b.at("1.weight").gradient, 1e-6, "layernorm weight gradient");
}

// ---- recomputation ----------------------------------------------------------

namespace {
using dropout_block = nn::residual<nn::layernorm<16>, nn::linear<16, 48, nn::gelu_tanh>, nn::dropout<10>, nn::linear<48, 16>>;
template <class Block>
using stack_of_four = nn::sequential<nn::features<16>, nn::linear<16, 16>, nn::chain<Block, Block, Block, Block>, nn::linear<16, 4>>;
template <class Block>
using recomputed_stack = stack_of_four<nn::recomputed<Block>>;

template <class P>
void check_bitwise_recompute() {
  using kept_t = nn::network<stack_of_four<dropout_block>, P, space>;
  using recomputed_t = nn::network<recomputed_stack<dropout_block>, P, space>;
  kept_t kept(batch, {.seed = 31});
  recomputed_t recomputed(batch, {.seed = 31});  // the same names, so the same initial values
  const values x = inputs<stack_of_four<dropout_block>>(32), dy = output_gradients<stack_of_four<dropout_block>>(33);
  const nn::run_mode step{true, 4};
  const pass_result a = run(kept, x, dy, executor{}, step), b = run(recomputed, x, dy, executor{}, step);
  CHECK(a.y == b.y);
  CHECK(a.dx == b.dx);
  REQUIRE(a.parameters.size() == b.parameters.size());
  for (const auto& [name, record] : a.parameters) {
    INFO(name);
    CHECK(record.data == b.parameters.at(name).data);
    CHECK(record.gradient == b.parameters.at(name).gradient);  // bit for bit
  }
}
}  // namespace

FUSOR_TEST_CASE("recomputed: gradients bit for bit those of keeping the activations (fp32, bf16, dropout inside)") {
  check_bitwise_recompute<fp32>();
  check_bitwise_recompute<bf16>();
}

FUSOR_TEST_CASE("recomputed: the activations kept per sample, with and without recompute") {
  using block = nn::residual<nn::layernorm<16>, nn::linear<16, 64, nn::gelu_tanh>, nn::linear<64, 16>>;
  using in = nn::features<16>;
  using block_t = nn::layer_instance<block, in, fp32, space>;
  using recomputed_t = nn::layer_instance<nn::recomputed<block>, in, fp32, space>;
  using four_t = nn::layer_instance<nn::chain<block, block, block, block>, in, fp32, space>;
  using four_recomputed_t = nn::layer_instance<nn::chain<nn::recomputed<block>, nn::recomputed<block>, nn::recomputed<block>,
                                                         nn::recomputed<block>>, in, fp32, space>;
  // The block keeps its chain's inner outputs (layernorm 16 + linear 64 floats) and the chain's output (16).
  static_assert(block_t::kept_bytes_per_sample == (16 + 64 + 16) * 4);
  static_assert(recomputed_t::kept_bytes_per_sample == 0);
  static_assert(recomputed_t::recomputed_bytes_per_sample == block_t::kept_bytes_per_sample);
  // Four in a chain: each block's and the outputs of the first three (the inputs of the others).
  constexpr index_t between_blocks = 3 * 16 * 4;
  static_assert(four_t::kept_bytes_per_sample == 4 * block_t::kept_bytes_per_sample + between_blocks);
  static_assert(four_recomputed_t::kept_bytes_per_sample == between_blocks);
  // Four recomputed blocks share one block's worth of scratch.
  static_assert(four_recomputed_t::scratch_bytes_per_sample == four_t::scratch_bytes_per_sample + block_t::kept_bytes_per_sample);
  static_assert(four_recomputed_t::kept_bytes(256) + four_recomputed_t::scratch_bytes(256) <
                four_t::kept_bytes(256) + four_t::scratch_bytes(256));
  MESSAGE("four blocks, bytes per sample kept / scratch: " << four_t::kept_bytes_per_sample << " / "
          << four_t::scratch_bytes_per_sample << "; recomputed: " << four_recomputed_t::kept_bytes_per_sample << " / "
          << four_recomputed_t::scratch_bytes_per_sample);
  // And what a network of them reserves runs as the one without recompute does.
  nn::network<nn::sequential<in, nn::chain<nn::recomputed<block>, nn::recomputed<block>>>, fp32, space> net(batch, {.seed = 34});
  const values x = random_values(std::size_t(batch * 16), 35), dy = random_values(std::size_t(batch * 16), 36);
  const pass_result r = run(net, x, dy, executor{});
  for (double v : r.dx) CHECK(std::isfinite(v));
}
