// The per-token layers of a GPT under every executor: nn::linear over
// features<Lead..., In> (every activation, nn::silu among them), nn::rmsnorm,
// nn::silu alone, nn::position_embedding and an output head tied to the token
// embedding (nn::tied_linear); forward and backward against double loops over
// the values the network stores, fp32, bf16 and fp16.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/fusor_test.hpp"

#include <fusor/nn/activation.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/nn/position_embedding.hpp>
#include <fusor/nn/rmsnorm.hpp>
#include <fusor/nn/tied_linear.hpp>

using namespace fusor;
using namespace fusor_test;

// Shapes, checked by the compiler: the leading feature axes pass through.
static_assert(std::is_same_v<nn::linear<12, 7>::output<nn::features<5, 12>>, nn::features<5, 7>>);
static_assert(std::is_same_v<nn::linear<12, 7>::output<nn::features<2, 3, 12>>, nn::features<2, 3, 7>>);
static_assert(std::is_same_v<nn::linear<12, 7>::output<nn::features<12>>, nn::features<7>>);
static_assert(nn::linear<12, 7>::accepts<nn::features<5, 12>> && !nn::linear<12, 7>::accepts<nn::features<12, 5>>);
static_assert(std::is_same_v<nn::linear<12, 8, nn::identity, nn::parallel<nn::column_parallel<2>>>::output<nn::features<5, 12>>,
                             nn::features<5, 4>>);
static_assert(nn::linear<12, 8, nn::identity, nn::parallel<nn::row_parallel<2>>>::accepts<nn::features<5, 6>>);
static_assert(std::is_same_v<nn::linear<12, 8, nn::identity, nn::parallel<nn::row_parallel<2>>>::output<nn::features<5, 6>>,
                             nn::features<5, 8>>);
static_assert(std::is_same_v<nn::rmsnorm<5>::output<nn::features<3, 5>>, nn::features<3, 5>>);
static_assert(nn::rmsnorm<5>::accepts<nn::features<3, 5>> && !nn::rmsnorm<5>::accepts<nn::features<5, 3>>);
static_assert(nn::position_embedding<6, 8>::accepts<nn::features<6, 8>> &&
              !nn::position_embedding<6, 8>::accepts<nn::features<5, 8>> &&
              !nn::position_embedding<6, 8>::accepts<nn::features<48>>);
static_assert(std::is_same_v<nn::sequential<nn::features<6, 8>, nn::position_embedding<6, 8>, nn::rmsnorm<8>,
                                            nn::linear<8, 32, nn::silu>, nn::linear<32, 8>>::output_features,
                             nn::features<6, 8>>);

namespace {
using values = std::vector<double>;
using function = std::function<double(double)>;

// Values rounded to the storage of precision P, as the network keeps them.
template <class P>
double stored(double v) {
  return convert<double>(convert<storage_t<P>>(v));
}
template <class P>
values stored(values v) {
  for (double& e : v) e = stored<P>(e);
  return v;
}

// One forward and one backward (with an input gradient) of a network of
// Sequential in precision P, every parameter random in [-1.5, 1.5) first
// (a norm's weight away from 1); what went in and came out, as doubles.
struct pass_record {
  values x, y, dy, dx;
  std::vector<values> parameters, gradients;
};
template <class Sequential, class P>
pass_record run_pass(index_t batch, std::uint32_t seed) {
  using net_t = nn::network<Sequential, P, space>;
  using input_extents = typename Sequential::input_features::batched_extents;
  executor ex{};
  net_t net(batch, {.seed = seed});
  pass_record r;
  std::uint32_t parameter_seed = seed + 100;
  net.for_each_parameter([&](const nn::parameter_slot&, auto v, auto) {
    host_tensor<typename decltype(v)::precision, typename decltype(v)::extents_type> h(v.extents());
    fill_random(h, parameter_seed++, -1.5, 1.5);
    copy(v, h);
    r.parameters.push_back(as_doubles(h));
  });
  host_tensor<P, input_extents> x{input_extents(batch)}, dx_host{input_extents(batch)};
  fill_random(x, seed + 1, -1.5, 1.5);
  r.x = as_doubles(x);
  const auto x_space = to_space(x);
  r.y = as_doubles(net.forward(x_space, ex));
  const auto dy_view = net.output_gradient();
  host_tensor<P, typename decltype(dy_view)::extents_type> dy(dy_view.extents());
  fill_random(dy, seed + 2, -1.5, 1.5);
  r.dy = as_doubles(dy);
  copy(dy_view, dy);
  auto dx = to_space(dx_host);
  poison(dx);
  net.backward(ex, typename net_t::input_view(dx.data(), batch));
  finish(ex);
  r.dx = as_doubles(dx);
  net.for_each_parameter([&](const nn::parameter_slot&, auto, auto g) { r.gradients.push_back(as_doubles(g)); });
  return r;
}

// nn::linear<In, Out, activation> over features<Tokens, In>: y = f(x w^T + b) per token.
template <class P, class Activation, std::size_t In, std::size_t Out>
void check_linear(const function& f, const function& df, double tolerance, const std::string& name) {
  constexpr index_t tokens = 5, batch = 3, rows = tokens * batch, in = In, out = Out;
  const auto r = run_pass<nn::sequential<nn::features<5, In>, nn::linear<In, Out, Activation>>, P>(batch, 17);
  const values& w = r.parameters[0];
  const values& b = r.parameters[1];
  values y(std::size_t(rows * out)), dpre(y.size()), dx(std::size_t(rows * in), 0.0), dw(w.size(), 0.0),
      db(b.size(), 0.0);
  for (index_t t = 0; t < rows; ++t)
    for (index_t o = 0; o < out; ++o) {
      double pre = b[std::size_t(o)];
      for (index_t k = 0; k < in; ++k) pre += r.x[std::size_t(t * in + k)] * w[std::size_t(o * in + k)];
      // bf16 keeps the pre-activation in its storage before the activation and its derivative.
      const double kept = stored<P>(pre);
      y[std::size_t(t * out + o)] = f(kept);
      dpre[std::size_t(t * out + o)] = stored<P>(df(kept) * r.dy[std::size_t(t * out + o)]);
    }
  for (index_t t = 0; t < rows; ++t)
    for (index_t o = 0; o < out; ++o) {
      const double g = dpre[std::size_t(t * out + o)];
      db[std::size_t(o)] += g;
      for (index_t k = 0; k < in; ++k) {
        dw[std::size_t(o * in + k)] += g * r.x[std::size_t(t * in + k)];
        dx[std::size_t(t * in + k)] += g * w[std::size_t(o * in + k)];
      }
    }
  const std::string what = "linear<" + std::to_string(In) + ", " + std::to_string(Out) + ", " + name + "> on [5, " +
                           std::to_string(In) + "] ";
  check_close(r.y, y, tolerance, what + "forward");
  check_close(r.dx, dx, tolerance, what + "dx");
  check_close(r.gradients[0], dw, tolerance, what + "dweight");
  check_close(r.gradients[1], db, tolerance, what + "dbias");
}

// The activations and their derivatives, in double.
namespace reference {
const function identity = [](double v) { return v; };
const function one = [](double) { return 1.0; };
const function relu = [](double v) { return v > 0 ? v : 0.0; };
const function relu_derivative = [](double v) { return v > 0 ? 1.0 : 0.0; };
const function gelu = [](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); };
const function gelu_derivative = [](double v) {
  const double k = 0.7978845608028654, t = std::tanh(k * (v + 0.044715 * v * v * v));
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
};
const function sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
const function silu = [](double v) { return v / (1 + std::exp(-v)); };
const function silu_derivative = [](double v) {
  const double s = 1 / (1 + std::exp(-v));
  return s * (1 + v * (1 - s));
};
}  // namespace reference

template <class P>
void check_every_linear(double tolerance) {
  check_linear<P, nn::identity, 12, 7>(reference::identity, reference::one, tolerance, "identity");
  check_linear<P, nn::relu, 12, 7>(reference::relu, reference::relu_derivative, tolerance, "relu");
  check_linear<P, nn::gelu_tanh, 12, 7>(reference::gelu, reference::gelu_derivative, tolerance, "gelu_tanh");
  check_linear<P, nn::gelu_tanh, 12, 16>(reference::gelu, reference::gelu_derivative, tolerance, "gelu_tanh (in the epilogue)");
  check_linear<P, nn::silu, 12, 7>(reference::silu, reference::silu_derivative, tolerance, "silu");
  check_linear<P, nn::tanh_activation, 12, 7>([](double v) { return std::tanh(v); },
                                              [](double v) { return 1 - std::tanh(v) * std::tanh(v); }, tolerance,
                                              "tanh");
  check_linear<P, nn::sigmoid_activation, 12, 7>(
      reference::sigmoid, [](double v) { return reference::sigmoid(v) * (1 - reference::sigmoid(v)); }, tolerance, "sigmoid");
}

template <class P>
void check_rmsnorm(double tolerance) {
  constexpr index_t rows_per_sample = 3, n = 20, batch = 5;
  const auto r = run_pass<nn::sequential<nn::features<3, 20>, nn::rmsnorm<20>>, P>(batch, 23);
  const values& w = r.parameters[0];
  values y(r.x.size()), dx(r.x.size()), dw(std::size_t(n), 0.0);
  for (index_t row = 0; row < batch * rows_per_sample; ++row) {
    const double* in = r.x.data() + row * n;
    const double* d = r.dy.data() + row * n;
    double mean_square = 0;
    for (index_t j = 0; j < n; ++j) mean_square += in[j] * in[j] / n;
    const double rstd = 1 / std::sqrt(mean_square + 1e-5);
    double mean_gx = 0;
    for (index_t j = 0; j < n; ++j) {
      const double xhat = in[j] * rstd;
      y[std::size_t(row * n + j)] = xhat * w[std::size_t(j)];
      dw[std::size_t(j)] += d[j] * xhat;
      mean_gx += d[j] * w[std::size_t(j)] * xhat / n;
    }
    for (index_t j = 0; j < n; ++j)
      dx[std::size_t(row * n + j)] = rstd * (d[j] * w[std::size_t(j)] - in[j] * rstd * mean_gx);
  }
  check_close(r.y, y, tolerance, "rmsnorm forward");
  check_close(r.dx, dx, tolerance, "rmsnorm dx");
  check_close(r.gradients[0], dw, tolerance, "rmsnorm dweight");
}

template <class P>
void check_silu_layer(double tolerance) {
  const auto r = run_pass<nn::sequential<nn::features<4, 9>, nn::silu>, P>(6, 29);
  values y(r.x.size()), dx(r.x.size());
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    y[i] = reference::silu(r.x[i]);
    dx[i] = reference::silu_derivative(r.x[i]) * r.dy[i];
  }
  check_close(r.y, y, tolerance, "silu forward");
  check_close(r.dx, dx, tolerance, "silu dx");
}

template <class P>
void check_position_embedding(double tolerance) {
  constexpr index_t positions = 6, channels = 8, batch = 7, sample = positions * channels;
  const auto r = run_pass<nn::sequential<nn::features<6, 8>, nn::position_embedding<6, 8>>, P>(batch, 31);
  const values& table = r.parameters[0];
  values y(r.x.size()), dtable(table.size(), 0.0);
  for (index_t b = 0; b < batch; ++b)
    for (index_t i = 0; i < sample; ++i) {
      y[std::size_t(b * sample + i)] = r.x[std::size_t(b * sample + i)] + table[std::size_t(i)];
      dtable[std::size_t(i)] += r.dy[std::size_t(b * sample + i)];
    }
  check_close(r.y, y, tolerance, "position_embedding forward");
  CHECK(r.dx == r.dy);
  check_close(r.gradients[0], dtable, tolerance, "position_embedding dweight");
}

// An nn::embedding<11, 8> whose table the head nn::tied_linear<8, 11, 0> reads:
// logits[t] = table table[id[t]]; the table's one gradient sums the head's
// dy^T x and the embedding's scatter of the head's dx (ids repeat, so rows add).
template <class P>
void check_tied_head(double tolerance) {
  constexpr index_t vocabulary = 11, channels = 8, tokens = 5, batch = 3, rows = tokens * batch;
  using net_t = nn::network<nn::sequential<nn::features<5>, nn::embedding<11, 8>, nn::tied_linear<8, 11, 0>>, P, space>;
  executor ex{};
  net_t net(batch, {.seed = 41});
  values table;
  int parameters = 0;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto v, auto) {
    ++parameters;
    CHECK(slot.name == "0.weight");
    host_tensor<typename decltype(v)::precision, typename decltype(v)::extents_type> h(v.extents());
    fill_random(h, 42, -1.5, 1.5);
    copy(v, h);
    table = as_doubles(h);
  });
  CHECK(parameters == 1);
  CHECK(net.parameter_count() == vocabulary * channels);
  host_tensor<std::int32_t, dextents<index_t, 2>> ids(batch, tokens);
  for (index_t i = 0; i < rows; ++i) ids.data()[i] = std::int32_t((i * 7 + 3) % vocabulary);
  const auto ids_space = to_space(ids);
  const values y = as_doubles(net.forward(ids_space, ex));
  const auto dy_view = net.output_gradient();
  host_tensor<P, typename decltype(dy_view)::extents_type> dy_host(dy_view.extents());
  fill_random(dy_host, 43, -1.5, 1.5);
  copy(dy_view, dy_host);
  const values dy = as_doubles(dy_host);
  net.backward(ex);
  finish(ex);
  values dtable;
  net.for_each_parameter([&](const nn::parameter_slot&, auto, auto g) { dtable = as_doubles(g); });

  values want_y(std::size_t(rows * vocabulary)), want_dtable(table.size(), 0.0);
  for (index_t t = 0; t < rows; ++t) {
    const index_t id = ids.data()[t];
    for (index_t v = 0; v < vocabulary; ++v) {
      double logit = 0;
      for (index_t c = 0; c < channels; ++c) {
        logit += table[std::size_t(id * channels + c)] * table[std::size_t(v * channels + c)];
        want_dtable[std::size_t(v * channels + c)] += dy[std::size_t(t * vocabulary + v)] * table[std::size_t(id * channels + c)];
      }
      want_y[std::size_t(t * vocabulary + v)] = logit;
    }
    for (index_t c = 0; c < channels; ++c) {
      double dx = 0;
      for (index_t v = 0; v < vocabulary; ++v)
        dx += dy[std::size_t(t * vocabulary + v)] * table[std::size_t(v * channels + c)];
      want_dtable[std::size_t(id * channels + c)] += stored<P>(dx);  // the embedding's dy, as stored
    }
  }
  check_close(y, want_y, tolerance, "tied head forward");
  check_close(dtable, want_dtable, tolerance, "tied table gradient");
}
}  // namespace

FUSOR_TEST_CASE("linear over features<Tokens, In>: forward and backward per token, every activation, fp32 and bf16") {
  check_every_linear<fp32>(2e-5);
  check_every_linear<bf16>(5e-2);
}

FUSOR_TEST_CASE("linear over features<Tokens, In> in fp16 (fp32 accumulation): identity and silu") {
  check_linear<fp16, nn::identity, 12, 7>(reference::identity, reference::one, 1e-2, "identity");
  check_linear<fp16, nn::silu, 12, 7>(reference::silu, reference::silu_derivative, 1e-2, "silu");
}

FUSOR_TEST_CASE("rmsnorm: forward and backward against a double loop, fp32, bf16 and fp16") {
  check_rmsnorm<fp32>(2e-5);
  check_rmsnorm<bf16>(5e-2);
  check_rmsnorm<fp16>(1e-2);
}

FUSOR_TEST_CASE("silu: forward and backward against a double loop, fp32, bf16 and fp16") {
  check_silu_layer<fp32>(2e-6);
  check_silu_layer<bf16>(1.6e-2);
  check_silu_layer<fp16>(2e-3);
}

FUSOR_TEST_CASE("position_embedding: the table added at every position, its gradient summed over the batch") {
  check_position_embedding<fp32>(2e-6);
  check_position_embedding<bf16>(1.6e-2);
  check_position_embedding<fp16>(2e-3);
}

FUSOR_TEST_CASE("position_embedding: parameter named weight, [Positions, Channels], drawn as nn::embedding's table") {
  nn::network<nn::sequential<nn::features<16, 32>, nn::position_embedding<16, 32>>, fp32, space> net(2, {.seed = 3});
  int parameters = 0;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto v, auto) {
    ++parameters;
    CHECK(slot.name == "0.weight");
    CHECK(slot.shape == std::vector<index_t>{16, 32});
    // U(-sqrt(3), sqrt(3)): within the bound, mean 0 and variance 1 within sampling error.
    const values table = as_doubles(v);
    double sum = 0, squares = 0;
    for (double e : table) {
      CHECK(std::fabs(e) <= std::sqrt(3.0));
      sum += e;
      squares += e * e;
    }
    const double n = double(table.size());
    CHECK(std::fabs(sum / n) < 5 / std::sqrt(n));
    CHECK(std::fabs(squares / n - 1) < 5 * std::sqrt(0.8 / n));
  });
  CHECK(parameters == 1);
}

FUSOR_TEST_CASE("rmsnorm: its weight starts at 1, named weight") {
  nn::network<nn::sequential<nn::features<4, 10>, nn::rmsnorm<10>>, bf16, space> net(2);
  int parameters = 0;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto v, auto) {
    ++parameters;
    CHECK(slot.name == "0.weight");
    CHECK(as_doubles(v) == values(10, 1.0));
  });
  CHECK(parameters == 1);
}

FUSOR_TEST_CASE("tied_linear: an output head that reads the embedding's table; one gradient sums both uses") {
  check_tied_head<fp32>(2e-5);
  check_tied_head<bf16>(5e-2);
}

FUSOR_TEST_CASE("init_std<2, 100>: an embedding's and a position table's deviation 0.02 (GPT-2's)") {
  nn::network<nn::sequential<nn::features<16>, nn::embedding<50, 32, nn::init_std<2, 100>>,
                             nn::position_embedding<16, 32, nn::init_std<2, 100>>>,
              fp32, space>
      net(2, {.seed = 4});
  int parameters = 0;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto v, auto) {
    ++parameters;
    INFO(slot.name);
    const values table = as_doubles(v);
    double sum = 0, squares = 0;
    for (double e : table) {
      CHECK(std::fabs(e) <= 0.02 * std::sqrt(3.0) * (1 + 1e-6));
      sum += e;
      squares += e * e;
    }
    const double n = double(table.size()), variance = squares / n;
    CHECK(std::fabs(sum / n) < 5 * 0.02 / std::sqrt(n));
    CHECK(std::fabs(variance / 0.0004 - 1) < 5 * std::sqrt(0.8 / n));
  });
  CHECK(parameters == 2);
}
