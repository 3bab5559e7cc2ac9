// tests/nn/nn_test.hpp — checking a layer's backward against central
// differences, in double on the host, through a network of that one layer;
// and a network's parameters (or their gradients) read as doubles.
//
// L(x, θ) = Σ y ⊙ r for a fixed random r, so dL/dy = r: backward from r must
// give dL/dθ and dL/dx, which central differences of L estimate.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <fusor/nn/network.hpp>

#include "support/fusor_test.hpp"

namespace nn_test {

using namespace fusor;

template <class V>
double weighted_sum(const V& y, const std::vector<double>& r) {
  double s = 0;
  for (index_t i = 0; i < y.size(); ++i) s += double(y.data()[i]) * r[std::size_t(i)];
  return s;
}

// Runs the gradient check for a network of fp64 on the host: every parameter
// element (up to `max_checks` per parameter, spread evenly) and every input element.
template <class Sequential>
void check_gradients(index_t batch, std::uint64_t seed, double tolerance = 1e-6, index_t max_checks = 40,
                     nn::run_mode mode = nn::training) {
  using net_t = nn::network<Sequential, double, host_space>;
  net_t net(batch, {.seed = seed});
  using in_ext = typename Sequential::input_features::batched_extents;
  tensor<double, in_ext> x{in_ext(batch)}, dx{in_ext(batch)};
  fusor_test::fill_random(x, std::uint32_t(seed + 1), -1.5, 1.5);
  fusor_test::poison(dx);
  auto y = net.forward(x, host_executor{}, mode);
  std::vector<double> r(std::size_t(y.size()));
  std::mt19937 rng(std::uint32_t(seed + 2));
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& v : r) v = u(rng);
  auto dy = net.output_gradient();
  for (index_t i = 0; i < dy.size(); ++i) dy.data()[i] = r[std::size_t(i)];
  net.backward(host_executor{}, typename net_t::input_view(dx.data(), batch));

  auto loss = [&] { return weighted_sum(net.forward(x, host_executor{}, mode), r); };
  auto check = [&](const std::string& what, double* value, double analytic) {
    const double keep = *value, h = 1e-6 * std::fmax(1.0, std::fabs(keep));
    *value = keep + h;
    const double up = loss();
    *value = keep - h;
    const double down = loss();
    *value = keep;
    const double numeric = (up - down) / (2 * h);
    INFO(what << ": analytic " << analytic << ", numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= tolerance * std::fmax(1.0, std::fabs(numeric)));
  };
  int checked = 0;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto gradients) {
    const index_t step = std::max<index_t>(1, slot.size / max_checks);
    for (index_t i = 0; i < slot.size; i += step, ++checked)
      check(slot.name + "[" + std::to_string(i) + "]", values.data() + i, gradients.data()[i]);
  });
  const index_t step = std::max<index_t>(1, x.size() / max_checks);
  for (index_t i = 0; i < x.size(); i += step, ++checked) check("x[" + std::to_string(i) + "]", x.data() + i, dx.data()[i]);
  CHECK(checked > 0);
}

// Every parameter of a network (or, with `gradients`, its gradient) as doubles, in order.
template <class Net>
std::vector<std::vector<double>> parameter_values(const Net& net, bool gradients) {
  std::vector<std::vector<double>> out;
  net.for_each_parameter([&](const nn::parameter_slot&, auto v, auto g) { out.push_back(fusor_test::as_doubles(gradients ? g : v)); });
  return out;
}

}  // namespace nn_test
