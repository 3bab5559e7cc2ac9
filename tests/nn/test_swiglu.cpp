// The hand-written SwiGLU layer (tests/nn/swiglu_layer.hpp, shown in
// docs/layers.md) under every executor: forward and backward against double
// loops, per position of features<3, 8>, in fp32 and bf16.
#include <cmath>
#include <string>
#include <vector>

#include "nn/swiglu_layer.hpp"
#include "nn/test_composition_support.hpp"

using namespace composition_test;

namespace {
template <class P>
void check_swiglu(double tolerance) {
  constexpr index_t batch = 4, positions = 3, dim = 8, hidden = 12, rows = batch * positions;
  using net_t = nn::network<nn::sequential<nn::features<positions, dim>, example::swiglu<dim, hidden>>, P, space>;
  executor ex{};
  net_t net(batch, {.seed = 3});
  const auto p = parameters_of(net);
  const values& w1 = p.at("0.w1.weight").data;
  const values& w2 = p.at("0.w2.weight").data;
  const values& w3 = p.at("0.w3.weight").data;
  values x, dy, unused;
  const auto x_space = to_space(random_host<P>(typename net_t::input_features::batched_extents(batch), 4, x));
  const values y = as_doubles(net.forward(x_space, ex));
  copy(net.output_gradient(), random_host<P>(net.output_gradient().extents(), 5, dy));
  auto dx_space = to_space(random_host<P>(typename net_t::input_features::batched_extents(batch), 6, unused));
  poison(dx_space);
  net.backward(ex, dx_space.view());
  const auto g = parameters_of(net);

  const auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  values want_y(std::size_t(rows * dim), 0.0), dx(std::size_t(rows * dim), 0.0), dw1(w1.size(), 0.0), dw2(w2.size(), 0.0),
      dw3(w3.size(), 0.0);
  for (index_t r = 0; r < rows; ++r) {
    const double* in = x.data() + r * dim;
    const double* d = dy.data() + r * dim;
    for (index_t k = 0; k < hidden; ++k) {
      double a = 0, b = 0, dh = 0;
      for (index_t j = 0; j < dim; ++j) {
        a += in[j] * w1[std::size_t(k * dim + j)];
        b += in[j] * w3[std::size_t(k * dim + j)];
      }
      const double s = sigmoid(a), h = a * s * b;
      for (index_t i = 0; i < dim; ++i) {
        want_y[std::size_t(r * dim + i)] += h * w2[std::size_t(i * hidden + k)];
        dw2[std::size_t(i * hidden + k)] += d[i] * h;
        dh += d[i] * w2[std::size_t(i * hidden + k)];
      }
      const double da = dh * b * s * (1 + a * (1 - s)), db = dh * a * s;
      for (index_t j = 0; j < dim; ++j) {
        dw1[std::size_t(k * dim + j)] += da * in[j];
        dw3[std::size_t(k * dim + j)] += db * in[j];
        dx[std::size_t(r * dim + j)] += da * w1[std::size_t(k * dim + j)] + db * w3[std::size_t(k * dim + j)];
      }
    }
  }
  check_close(y, want_y, tolerance, "swiglu forward");
  check_close(as_doubles(dx_space), dx, tolerance, "swiglu dx");
  check_close(g.at("0.w1.weight").gradient, dw1, tolerance, "swiglu dw1");
  check_close(g.at("0.w2.weight").gradient, dw2, tolerance, "swiglu dw2");
  check_close(g.at("0.w3.weight").gradient, dw3, tolerance, "swiglu dw3");
}
}  // namespace

FUSOR_TEST_CASE("SwiGLU written against the layer protocol: forward and backward against double loops, fp32 and bf16") {
  check_swiglu<fp32>(2e-5);
  check_swiglu<bf16>(6e-2);
}
