// The per-token layers' backward against central differences, fp64 on the
// host: nn::linear over features<5, 12> with every activation, nn::rmsnorm
// (its weight drawn away from 1), nn::silu and nn::position_embedding, alone
// and in a small GPT-like stack after an nn::embedding (with and without an
// output head tied to the embedding, nn::tied_linear); the ties' errors.
#include "nn/nn_test.hpp"

#include <algorithm>

#include <fusor/nn/activation.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/position_embedding.hpp>
#include <fusor/nn/rmsnorm.hpp>
#include <fusor/nn/tied_linear.hpp>

using namespace fusor;

namespace {
// nn_test::check_gradients for a network the test has built (its parameters
// redrawn, or its input token ids): L = sum y * r; backward from r against
// central differences of L, for up to `max_checks` elements of every parameter
// and, when `x` holds values (not ids), every element of x.
template <class Net, class X>
void check_built_network(Net& net, X& x, index_t batch, std::uint32_t seed, index_t max_checks) {
  using input_view = typename Net::input_view;
  constexpr bool with_input_gradient = std::is_same_v<typename X::element_type, double>;
  tensor<double, typename input_view::extents_type> dx{typename input_view::extents_type(batch)};
  fusor_test::poison(dx);
  const auto y = net.forward(x, host_executor{});
  std::vector<double> r(std::size_t(y.size()));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& v : r) v = u(rng);
  for (index_t i = 0; i < y.size(); ++i) net.output_gradient().data()[i] = r[std::size_t(i)];
  if constexpr (with_input_gradient) net.backward(host_executor{}, input_view(dx.data(), batch));
  else net.backward(host_executor{});
  const auto loss = [&] { return nn_test::weighted_sum(net.forward(x, host_executor{}), r); };
  int checked = 0;
  const auto check = [&](const std::string& what, auto* value, double analytic) {
    const auto keep = *value;
    const double h = 1e-6;
    *value = keep + h;
    const double up = loss();
    *value = keep - h;
    const double down = loss();
    *value = keep;
    const double numeric = (up - down) / (2 * h);
    INFO(what << ": analytic " << analytic << ", numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= 1e-6 * std::fmax(1.0, std::fabs(numeric)));
    ++checked;
  };
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto gradients) {
    const index_t step = std::max<index_t>(1, slot.size / max_checks);
    for (index_t i = 0; i < slot.size; i += step)
      check(slot.name + "[" + std::to_string(i) + "]", values.data() + i, gradients.data()[i]);
  });
  if constexpr (with_input_gradient)
    for (index_t i = 0; i < x.size(); ++i) check("x[" + std::to_string(i) + "]", x.data() + i, dx.data()[i]);
  CHECK(checked > 0);
}
}  // namespace

TEST_CASE("linear over features<5, 12>: gradients against central differences, every activation") {
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 7>>>(3, 111);
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 7, nn::relu>>>(3, 112);
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 7, nn::gelu_tanh>>>(3, 113);
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 8, nn::gelu_tanh>>>(3, 114);  // epilogue
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 7, nn::silu>>>(3, 115);
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 7, nn::tanh_activation>>>(2, 116);
  nn_test::check_gradients<nn::sequential<nn::features<5, 12>, nn::linear<12, 7, nn::sigmoid_activation>>>(2, 117);
  // Three leading axes, and a second linear whose dx reaches the first's parameters.
  nn_test::check_gradients<nn::sequential<nn::features<2, 3, 12>, nn::linear<12, 9, nn::silu>, nn::linear<9, 4>>>(
      2, 118);
}

TEST_CASE("silu: gradients against central differences, alone and inside a linear") {
  nn_test::check_gradients<nn::sequential<nn::features<4, 6>, nn::silu>>(3, 121);
  nn_test::check_gradients<nn::sequential<nn::features<9>, nn::linear<9, 6, nn::silu>, nn::linear<6, 3>>>(4, 122);
}

TEST_CASE("rmsnorm: gradients against central differences, one row and several rows per sample") {
  nn_test::check_gradients<nn::sequential<nn::features<6>, nn::rmsnorm<6>>>(3, 131);
  nn_test::check_gradients<nn::sequential<nn::features<3, 5>, nn::rmsnorm<5>>>(2, 132);

  // The weight away from 1 (it starts there): every parameter redrawn, then
  // every parameter's and every input's gradient against central differences.
  using net_t = nn::network<nn::sequential<nn::features<4, 7>, nn::rmsnorm<7>, nn::linear<7, 3>>, double, host_space>;
  using input_extents = net_t::input_features::batched_extents;
  const index_t batch = 3;
  net_t net(batch, {.seed = 133});
  std::uint32_t seed = 134;
  net.for_each_parameter([&](const nn::parameter_slot&, auto values, auto) {
    fusor_test::fill_random(values, seed++, -1.5, 1.5);
  });
  tensor<double, input_extents> x{input_extents(batch)};
  fusor_test::fill_random(x, 135, -1.5, 1.5);
  check_built_network(net, x, batch, 136, 1000);
}

TEST_CASE("position_embedding: gradients against central differences, alone and after other layers") {
  nn_test::check_gradients<nn::sequential<nn::features<5, 4>, nn::position_embedding<5, 4>>>(3, 141);
  nn_test::check_gradients<nn::sequential<nn::features<4, 6>, nn::linear<6, 6>, nn::position_embedding<4, 6>,
                                          nn::rmsnorm<6>, nn::linear<6, 3, nn::silu>>>(3, 142);
}

TEST_CASE("a GPT-like stack: token and position embeddings, rmsnorm, an MLP per token; every parameter's gradient") {
  using net_t = nn::network<nn::sequential<nn::features<6>, nn::embedding<11, 8>, nn::position_embedding<6, 8>,
                                           nn::rmsnorm<8>, nn::linear<8, 16, nn::silu>, nn::linear<16, 8>,
                                           nn::rmsnorm<8>, nn::flatten, nn::linear<48, 3>>,
                            double, host_space>;
  static_assert(std::is_same_v<net_t::layer_type<2>::input_features, nn::features<6, 8>>);
  const index_t batch = 3;
  net_t net(batch, {.seed = 151});
  tensor<std::int32_t, dextents<index_t, 2>> ids(batch, 6);
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t((i * 5 + 2) % 11);
  check_built_network(net, ids, batch, 152, 30);
}

TEST_CASE("tied_linear: a GPT-like stack whose head reads the embedding's table; the table's gradient sums both uses") {
  using net_t = nn::network<nn::sequential<nn::features<6>, nn::embedding<11, 8>, nn::position_embedding<6, 8>,
                                           nn::rmsnorm<8>, nn::linear<8, 16, nn::silu>, nn::linear<16, 8>,
                                           nn::rmsnorm<8>, nn::tied_linear<8, 11, 0>>,
                            double, host_space>;
  const index_t batch = 3;
  net_t net(batch, {.seed = 161});
  std::vector<std::string> names;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto, auto) { names.push_back(slot.name); });
  CHECK(std::find(names.begin(), names.end(), "6.weight") == names.end());  // stored once, as 0.weight
  CHECK(net.parameter_count() == 11 * 8 + 6 * 8 + 8 + (8 * 16 + 16) + (16 * 8 + 8) + 8);
  tensor<std::int32_t, dextents<index_t, 2>> ids(batch, 6);
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t((i * 5 + 2) % 11);
  // Perturbing 0.weight moves the embedding and the head: central differences see both.
  check_built_network(net, ids, batch, 162, 88);

  // A second backward gives the same gradients (the tied part is added once per backward).
  std::vector<double> first;
  net.for_each_parameter([&](const nn::parameter_slot&, auto, auto g) { first.insert(first.end(), g.data(), g.data() + g.size()); });
  net.forward(ids, host_executor{});
  net.backward(host_executor{});
  std::vector<double> second;
  net.for_each_parameter([&](const nn::parameter_slot&, auto, auto g) { second.insert(second.end(), g.data(), g.data() + g.size()); });
  CHECK(first == second);
}

TEST_CASE("tied_linear: a tie to a missing, mismatched, later or other-stage parameter is an error naming it") {
  // The owner's weight is [11, 8]; a head of [10, 8] does not fit.
  fusor_test::expect_error<shape_error>(
      [] { nn::network<nn::sequential<nn::features<6>, nn::embedding<11, 8>, nn::tied_linear<8, 10, 0>>, double> net(2); },
      {"1.weight", "[10, 8]", "0.weight", "[11, 8]"});
  // Layer 0 has no weight.
  fusor_test::expect_error<error>(
      [] { nn::network<nn::sequential<nn::features<4, 8>, nn::silu, nn::tied_linear<8, 8, 0>>, double> net(2); },
      {"1.weight", "0.weight", "before it"});
  // The owner comes after the head.
  fusor_test::expect_error<error>(
      [] { nn::network<nn::sequential<nn::features<4, 8>, nn::tied_linear<8, 8, 1>, nn::linear<8, 8>>, double> net(2); },
      {"0.weight", "1.weight", "before it"});
  // A pipeline stage that holds the embedding but not the head.
  fusor_test::expect_error<error>(
      [] {
        nn::network<nn::sequential<nn::features<6>, nn::embedding<11, 8>, nn::rmsnorm<8>, nn::tied_linear<8, 11, 0>>, double>
            net(2, {.layers = {0, 2}});
      },
      {"2.weight", "0.weight", "pipeline stage"});
}
