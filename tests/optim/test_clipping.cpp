// Gradient clipping by global norm across two buffers (fp32 and bf16), above
// and below max_norm: the squared norm against fp64, the multiplier
// min(1, max_norm / (norm + 1e-6)), and an SGD step that uses it; with a loss
// scale, clipping judges the unscaled norm.
#include <cmath>
#include <string>

#include "optim/optim_support.hpp"

using namespace optim_test;

namespace {

double sum_of_squares(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return s;
}

// Two buffers of norm about sqrt(1000 * 4/3 + 333 * 4/3) ~ 42 for grads in [-2, 2].
void clip_two_buffers(float max_norm, float loss_scale) {
  const index_t n1 = 1000, n2 = 333;
  executor ex{};
  optim::loss_scaling scaling;
  scaling.dynamic = loss_scale != 1.0f;
  scaling.initial_scale = loss_scale;
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.5f), {max_norm}, scaling,
                                             ex_stream(ex));
  CHECK(controller.clipping().max_norm == max_norm);
  const auto host_w1 = random_flat<float>(n1, 31);
  const auto host_w2 = random_flat<bfloat16>(n2, 32);
  auto w1 = to_space(host_w1);
  auto w2 = to_space(host_w2);
  // Gradients as the backward pass leaves them: scaled by the loss scale.
  auto host_g1 = random_flat<float>(n1, 33, -2.0 * loss_scale, 2.0 * loss_scale);
  auto host_g2 = random_flat<bfloat16>(n2, 34, -2.0 * loss_scale, 2.0 * loss_scale);
  const auto g1 = to_space(host_g1);
  const auto g2 = to_space(host_g2);
  optim::sgd<float, space> sgd1(n1);
  optim::sgd<bfloat16, space> sgd2(n2);
  sgd2.initialize(w2.view(), ex);

  controller.begin_step(ex);
  controller.accumulate_gradient_norm(g1, ex);
  controller.accumulate_gradient_norm(g2.view(), ex);
  controller.prepare_update(ex);
  sgd1.step(w1.view(), g1.view(), controller.scalars(), ex);
  sgd2.step(w2.view(), g2.view(), controller.scalars(), ex);
  finish(ex);

  const auto d1 = as_doubles_host(host_g1), d2 = as_doubles_host(host_g2);
  const double norm_squared = sum_of_squares(d1) + sum_of_squares(d2);
  const double norm = std::sqrt(norm_squared) / loss_scale;
  const double clip = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
  const double multiplier = clip / loss_scale;
  const std::string what = "max_norm " + std::to_string(max_norm) + ", loss scale " + std::to_string(loss_scale);
  INFO(what);
  CHECK(close(controller.scalars().read_gradient_norm_squared(), norm_squared, 1e-12));
  CHECK(close(controller.scalars().read_gradient_multiplier(), multiplier, 1e-6));
  CHECK(!controller.scalars().read_skip());
  if (max_norm > 0 && norm > max_norm) CHECK(clip < 0.99);  // the case clips
  if (max_norm > 0 && norm < max_norm) CHECK(clip == 1.0);

  auto expected = [&](const std::vector<double>& w, const std::vector<double>& g) {
    std::vector<double> out(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) out[i] = w[i] - 0.5 * g[i] * multiplier;
    return out;
  };
  check_close(as_doubles(w1), expected(as_doubles_host(host_w1), d1), 4e-6, what + " buffer 1");
  check_close(as_doubles(sgd2.master_weights()), expected(as_doubles_host(host_w2), d2), 4e-6, what + " buffer 2");
}

}  // namespace

FUSOR_TEST_CASE("clipping: global norm over two buffers, above and below max_norm") {
  clip_two_buffers(5.0f, 1.0f);    // norm ~42: clipped to 5
  clip_two_buffers(100.0f, 1.0f);  // below: untouched
  clip_two_buffers(0.0f, 1.0f);    // clipping off
}

FUSOR_TEST_CASE("clipping: judged on the unscaled norm when the loss is scaled") {
  clip_two_buffers(5.0f, 1024.0f);
  clip_two_buffers(100.0f, 1024.0f);
}

FUSOR_TEST_CASE("clipping: the norm of a large buffer and of an unaligned one") {
  // Many blocks on the GPU (the last-arriving block adds the partial sums), then
  // a view starting one element in (no vector loads), added to the same total.
  const index_t n = 3000017;
  const auto host_g = random_flat<float16>(n, 35);
  const auto g = to_space(host_g);
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.1f), {}, {}, ex_stream(ex));
  controller.begin_step(ex);
  controller.accumulate_gradient_norm(g, ex);
  const double whole = sum_of_squares(as_doubles_host(host_g));
  CHECK(close(controller.scalars().read_gradient_norm_squared(), whole, 1e-12));
  const fusor::view<float16, flat, row_major, space> shifted(g.data() + 1, n - 1);
  controller.accumulate_gradient_norm(shifted, ex);
  const double first = convert<double>(host_g.data()[0]);
  CHECK(close(controller.scalars().read_gradient_norm_squared(), 2 * whole - first * first, 1e-12));
  // Repeatable to the bit: the same sum again.
  controller.begin_step(ex);
  controller.accumulate_gradient_norm(g, ex);
  const double again = controller.scalars().read_gradient_norm_squared();
  controller.begin_step(ex);
  controller.accumulate_gradient_norm(g, ex);
  CHECK(controller.scalars().read_gradient_norm_squared() == again);
}

FUSOR_TEST_CASE("clipping: option errors") {
  expect_error<fusor::error>(
      [] { optim::update_controller<space>(optim::learning_rate_schedule::constant(0.1f), {-1.0f}); }, {"max_norm"});
  // NaN would mean no clipping without a word; so would a negative or NaN learning rate mean nonsense.
  expect_error<fusor::error>(
      [] { optim::update_controller<space>(optim::learning_rate_schedule::constant(0.1f), {NAN}); },
      {"max_norm", "nan"});
  expect_error<fusor::error>([] { optim::update_controller<space>(optim::learning_rate_schedule::constant(-1.0f)); },
                             {"learning-rate schedule's rates must be finite and >= 0", "-1"});
  expect_error<fusor::error>(
      [] { optim::update_controller<space>(optim::learning_rate_schedule::warmup_cosine(NAN, 1, 2)); }, {"nan"});
  expect_error<fusor::error>(
      [] { optim::update_controller<space>(optim::learning_rate_schedule::warmup_cosine(1e-3f, 1, 2, -1e-4f)); },
      {"final -0.000100"});
  optim::loss_scaling bad;
  bad.dynamic = true;
  bad.backoff_factor = 1.5f;
  expect_error<fusor::error>(
      [&] { optim::update_controller<space>(optim::learning_rate_schedule::constant(0.1f), {}, bad); },
      {"backoff_factor"});
}
