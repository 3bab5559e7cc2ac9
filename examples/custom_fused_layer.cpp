// examples/custom_fused_layer.cpp — your own activation as a fused layer.
//
// Write the function once, as a fusor expression of x. nn::elementwise<F>
// makes it a layer: forward is one fused pass, and backward is the derivative
// that fusor derives from the expression at compile time (also one pass) —
// no hand-written gradient. Used after a linear layer it runs in the same
// layer, right after the matmul.
//
// This program puts such an activation into a small network (fp64, host),
// runs forward and backward, and checks every gradient the network computed
// against central differences of the loss; it prints the worst relative
// error and exits non-zero if any is too large.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <fusor/app/command_line.hpp>
#include <fusor/expr/operators.hpp>
#include <fusor/nn/activation.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace fs = fusor;
namespace nn = fusor::nn;

// The user's activation: x * sigmoid(1.702 x), the sigmoid approximation of GELU.
struct scaled_swish {
  static auto apply(const auto& x) { return x * fs::sigmoid(1.702 * x); }
};
using swish = nn::elementwise<scaled_swish>;

// Fused into a linear layer's output, and as a layer of its own.
using model = nn::sequential<nn::features<12>,
                             nn::linear<12, 16, swish>,
                             nn::linear<16, 8>,
                             swish,
                             nn::linear<8, 3>>;

int main(int argc, char** argv) {
  fs::app::command_line("Checks a custom fused activation's derived gradient against central differences; no options.")
      .parse_or_exit(argc, argv);
  const fs::index_t batch = 4;
  nn::network<model, double, fs::host_space> net(batch, {.seed = 2024});
  const fs::host_executor ex{};

  using batch_of_inputs = model::input_features::batched_extents;  // [batch, 12]
  fs::tensor<double, batch_of_inputs> x{batch_of_inputs{batch}}, dx{batch_of_inputs{batch}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  for (fs::index_t i = 0; i < x.size(); ++i) x.data()[i] = uniform(rng);

  // The loss L = sum(y * r) for a fixed random r, so dL/dy = r.
  auto y = net.forward(x, ex);
  std::vector<double> r(static_cast<std::size_t>(y.size()));
  for (double& v : r) v = uniform(rng);
  for (fs::index_t i = 0; i < y.size(); ++i) net.output_gradient().data()[i] = r[static_cast<std::size_t>(i)];
  net.backward(ex, decltype(net)::input_view(dx.data(), batch));

  const auto loss = [&] {
    const auto out = net.forward(x, ex);
    double sum = 0;
    for (fs::index_t i = 0; i < out.size(); ++i) sum += out.data()[i] * r[static_cast<std::size_t>(i)];
    return sum;
  };
  double worst = 0;
  long checked = 0;
  // (analytic - numeric) / max(1, |numeric|) for the value at `where`.
  const auto check = [&](double* where, double analytic) {
    const double keep = *where, h = 1e-6 * std::max(1.0, std::fabs(keep));
    *where = keep + h;
    const double up = loss();
    *where = keep - h;
    const double down = loss();
    *where = keep;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(analytic - numeric) / std::max(1.0, std::fabs(numeric)));
    ++checked;
  };
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto gradients) {
    for (fs::index_t i = 0; i < slot.size; ++i) check(values.data() + i, gradients.data()[i]);
  });
  for (fs::index_t i = 0; i < x.size(); ++i) check(x.data() + i, dx.data()[i]);

  const double tolerance = 1e-6;
  std::printf("custom fused layer: x * sigmoid(1.702 x), backward derived at compile time\n");
  std::printf("checked %ld gradients (%lld parameters, %lld inputs) against central differences\n", checked,
              static_cast<long long>(net.parameter_count()), static_cast<long long>(x.size()));
  std::printf("worst relative error %.3g (tolerance %.0e): %s\n", worst, tolerance, worst <= tolerance ? "ok" : "WRONG");
  return worst <= tolerance ? 0 : 1;
}
