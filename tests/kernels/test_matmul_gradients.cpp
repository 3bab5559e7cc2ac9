// Backward epilogues against central differences of the forward, in fp64 on
// the host: a two-layer perceptron y = act(x w1^T + b1) w2^T + b2 with the loss
// L = sum(y * g), run forward with the fused epilogues (bias + activation with
// its auxiliary output; bias) and backward with the fused backward epilogues
// (weight gradient with the bias gradient; activation gradient with the bias
// gradient), so the forward and backward conventions are checked together.
#include "kernels/test_matmul_support.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_matmul_gradients {

using namespace matmul_test;

namespace {
constexpr index_t m = 4, k = 5, h = 8, n = 3;  // h: the pre-activation's row stride is a multiple of 8

enum class activation { relu, gelu };

struct perceptron {
  host_tensor<double, matrix> x = random_host<double>(matrix(m, k), 201);
  host_tensor<double, matrix> w1 = random_host<double>(matrix(h, k), 202);
  host_tensor<double, vector> b1 = random_host<double>(vector(h), 203);
  host_tensor<double, matrix> w2 = random_host<double>(matrix(n, h), 204);
  host_tensor<double, vector> b2 = random_host<double>(vector(n), 205);
  host_tensor<double, matrix> g = random_host<double>(matrix(m, n), 206);  // dL/dy

  // Forward through the epilogues; returns L and leaves the auxiliary outputs.
  double loss(activation act, host_tensor<double, matrix>& hidden, host_tensor<double, matrix>& pre,
              relu_mask<host_space>& mask) const {
    if (act == activation::gelu) matmul(hidden, x, transpose(w1.view()), epilogue::gelu_tanh(b1, pre));
    else matmul(hidden, x, transpose(w1.view()), epilogue::relu(b1, mask));
    host_tensor<double, matrix> y(m, n);
    matmul(y, hidden, transpose(w2.view()), epilogue::bias(b2));
    double l = 0;
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) l += y(i, j) * g(i, j);
    return l;
  }
  double loss(activation act) const {
    host_tensor<double, matrix> hidden(m, h), pre(m, h);
    relu_mask<host_space> mask(matrix(m, h));
    return loss(act, hidden, pre, mask);
  }
};

// Central difference of L in one parameter, which is perturbed in place.
double numeric(perceptron& p, activation act, double& parameter) {
  const double step = 1e-6, saved = parameter;
  parameter = saved + step;
  const double up = p.loss(act);
  parameter = saved - step;
  const double down = p.loss(act);
  parameter = saved;
  return (up - down) / (2 * step);
}
}  // namespace

TEST_CASE("[host] matmul backward epilogues match central differences of the forward (fp64)") {
  for (activation act : {activation::gelu, activation::relu}) {
    const char* activation_name = act == activation::gelu ? "gelu_tanh" : "relu";
    INFO(activation_name);
    perceptron p;
    host_tensor<double, matrix> hidden(m, h), pre(m, h);
    relu_mask<host_space> mask(matrix(m, h));
    p.loss(act, hidden, pre, mask);
    if (act == activation::relu) {
      // Central differences need every pre-activation away from relu's kink.
      host_tensor<double, matrix> z(m, h);
      matmul(z, p.x, transpose(p.w1.view()), epilogue::bias(p.b1));
      double nearest = 1e9;
      for (index_t i = 0; i < z.size(); ++i) nearest = std::min(nearest, std::fabs(z.data()[i]));
      REQUIRE(nearest > 1e-4);
    }

    // Backward, all through epilogues.
    host_tensor<double, matrix> dw2(n, h), dpre(m, h), dw1(h, k), dx(m, k);
    host_tensor<double, vector> db2(n), db1(h);
    matmul(dw2, transpose(p.g.view()), hidden, epilogue::bias_gradient_a(db2));  // dW2 = g^T hidden, db2 = sum of g
    if (act == activation::gelu) matmul(dpre, p.g, p.w2, epilogue::gelu_tanh_backward(pre, db1));
    else matmul(dpre, p.g, p.w2, epilogue::relu_backward(mask, db1));
    matmul(dw1, transpose(dpre.view()), p.x);  // dW1 = dpre^T x
    matmul(dx, dpre, p.w1);                     // dx = dpre W1

    checker check;
    const auto compare = [&](const char* what, auto& parameters, const auto& analytic) {
      for (index_t i = 0; i < parameters.size(); ++i) {
        const double want = numeric(p, act, parameters.data()[i]);
        check(analytic.data()[i], want, std::fabs(want) + 1, 1e-6, what, 0, 0, i);
      }
    };
    compare("w2", p.w2, dw2);
    compare("b2", p.b2, db2);
    compare("w1", p.w1, dw1);
    compare("b1", p.b1, db1);
    compare("x", p.x, dx);
    MATMUL_CHECK_ALL(check);
    CHECK(check.checked == n * h + n + h * k + h + m * k);
  }
}

}  // namespace test_matmul_gradients
