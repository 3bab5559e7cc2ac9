// The dynamic loss scaler on planted overflows: a step whose gradients hold Inf
// or NaN is skipped (parameters, moments, master weights and the step count
// unchanged), the scale halves and the clean count restarts; after
// growth_interval clean steps the scale doubles; the gradient multiplier
// unscales, so the applied steps match AdamW on the unscaled gradients.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "optim/optim_support.hpp"

using namespace optim_test;

namespace {

struct snapshot {
  std::vector<double> params, exp_avg, exp_avg_sq, master;
};
template <class Optimizer, class Params>
snapshot take(const Optimizer& optimizer, const Params& params) {
  snapshot s;
  s.params = as_doubles(params);
  optimizer.for_each_state([&](const char* name, const auto& state) {
    const std::string n = name;
    (n == "exp_avg" ? s.exp_avg : n == "exp_avg_sq" ? s.exp_avg_sq : s.master) = as_doubles(state);
  });
  return s;
}

}  // namespace

FUSOR_TEST_CASE("loss scaler: planted Inf and NaN skip the step and halve the scale; clean steps grow it") {
  const index_t n = 2053;
  const int steps = 14;
  const int inf_step = 3, nan_step = 6, second_inf_step = 7;
  optim::loss_scaling scaling;
  scaling.dynamic = true;
  scaling.growth_interval = 4;
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(1e-2f), {}, scaling,
                                             ex_stream(ex));
  CHECK(controller.scaling().growth_interval == 4);
  CHECK(controller.loss_scale_for_host() == 65536.0f);
  const auto host_params = random_flat<float16>(n, 41);
  auto params = to_space(host_params);
  flat_space<float16> grads(n);
  optim::adamw<float16, space> optimizer(n);
  optimizer.initialize(params.view(), ex);
  adamw_reference reference{optimizer.options(), as_doubles_host(host_params), {}, {}};

  double scale = 65536.0;
  std::int64_t applied = 0, clean = 0;
  for (int s = 0; s < steps; ++s) {
    INFO("step ", s);
    // The true gradient is small (|g| < 2^-14 * 8); the backward pass produced it times the scale.
    const auto unscaled = random_flat<double>(n, std::uint32_t(300 + s), -4e-4, 4e-4);
    flat_host<float16> host_grads(n);
    for (index_t i = 0; i < n; ++i) host_grads.data()[i] = convert<float16>(unscaled.data()[i] * scale);
    if (s == inf_step) host_grads.data()[17] = convert<float16>(std::numeric_limits<double>::infinity());
    if (s == second_inf_step) host_grads.data()[n - 1] = convert<float16>(-std::numeric_limits<double>::infinity());
    if (s == nan_step) host_grads.data()[1000] = convert<float16>(std::nan(""));
    copy(grads, host_grads);
    const bool overflow = s == inf_step || s == nan_step || s == second_inf_step;

    const auto before = take(optimizer, params);
    controller.begin_step(ex);
    controller.accumulate_gradient_norm(grads, ex);
    controller.prepare_update(ex);
    CHECK(controller.scalars().read_skip() == overflow);
    CHECK(controller.scalars().read_loss_scale() == float(scale));
    if (!overflow) CHECK(controller.scalars().read_gradient_multiplier() == float(1.0 / scale));  // unscales
    optimizer.step(params.view(), grads.view(), controller.scalars(), ex);
    controller.finish_step(ex);
    finish(ex);

    if (overflow) {
      const auto after = take(optimizer, params);
      check_equal(after.params, before.params, "skipped step: parameters");
      check_equal(after.master, before.master, "skipped step: master weights");
      check_equal(after.exp_avg, before.exp_avg, "skipped step: exp_avg");
      check_equal(after.exp_avg_sq, before.exp_avg_sq, "skipped step: exp_avg_sq");
      scale *= 0.5;
      clean = 0;
    } else {
      std::vector<double> g(static_cast<std::size_t>(n));
      for (index_t i = 0; i < n; ++i) g[std::size_t(i)] = convert<double>(host_grads.data()[i]) / (scale);
      reference.step(g, 1e-2);
      ++applied;
      if (++clean == scaling.growth_interval) scale *= 2.0, clean = 0;
    }
    CHECK(controller.scalars().read_step() == applied);
    CHECK(controller.scalars().read_clean_steps() == clean);
    CHECK(controller.loss_scale_for_host() == float(scale));
  }
  // Three skips and one growth (steps 8-11 are clean) over the run: 2^16 / 8 * 2.
  CHECK(scale == 16384.0);
  CHECK(applied == steps - 3);
  check_close(as_doubles(optimizer.master_weights()), reference.w, 4e-6, "master weights after the run");
}

FUSOR_TEST_CASE("loss scaler: a skipped first step leaves SGD's momentum for the first applied step") {
  const index_t n = 517;
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.1f), {},
                                             {true, 256.0f, 2000, 2.0f, 0.5f}, ex_stream(ex));
  const auto host_params = random_flat<float>(n, 51);
  auto params = to_space(host_params);
  flat_space<float> grads(n);
  optim::sgd<float, space> optimizer(n, {0.9f, 0.5f});
  sgd_reference reference{optimizer.options(), as_doubles_host(host_params), {}};
  for (int s = 0; s < 4; ++s) {
    const double scale = s == 0 ? 256.0 : 128.0;
    auto host_grads = random_flat<float>(n, std::uint32_t(400 + s), -scale, scale);
    if (s == 0) host_grads.data()[5] = std::nanf("");
    copy(grads, host_grads);
    train_step(controller, optimizer, params.view(), grads.view(), ex);
    finish(ex);
    if (s == 0) continue;
    std::vector<double> g = as_doubles_host(host_grads);
    for (double& x : g) x /= scale;
    reference.step(g, 0.1);  // the first applied step sets momentum = g (no dampening)
  }
  CHECK(controller.scalars().read_step() == 3);
  CHECK(controller.loss_scale_for_host() == 128.0f);
  check_close(as_doubles(params), reference.w, 4e-6, "sgd after a skipped first step");
}

FUSOR_TEST_CASE("loss scaler: the default growth interval (2000) on a tiny buffer") {
  const index_t n = 8;
  executor ex{};
  optim::loss_scaling scaling;
  scaling.dynamic = true;
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(1e-3f), {}, scaling,
                                             ex_stream(ex));
  auto params = to_space(random_flat<float16>(n, 61));
  auto grads = to_space(random_flat<float16>(n, 62, -100.0, 100.0));
  optim::sgd<float16, space> optimizer(n);
  optimizer.initialize(params.view(), ex);
  for (int s = 0; s < 1999; ++s) train_step(controller, optimizer, params.view(), grads.view(), ex);
  CHECK(controller.loss_scale_for_host() == 65536.0f);
  CHECK(controller.scalars().read_clean_steps() == 1999);
  train_step(controller, optimizer, params.view(), grads.view(), ex);
  CHECK(controller.loss_scale_for_host() == 131072.0f);
  CHECK(controller.scalars().read_clean_steps() == 0);
  CHECK(controller.step_for_host() == 2000);
}

FUSOR_TEST_CASE("loss scaler: without dynamic scaling the scale stays 1 and NaN still skips") {
  const index_t n = 300;
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.1f), {}, {}, ex_stream(ex));
  CHECK(controller.loss_scale_for_host() == 1.0f);
  auto params = to_space(random_flat<bfloat16>(n, 71));
  auto host_grads = random_flat<bfloat16>(n, 72);
  host_grads.data()[0] = convert<bfloat16>(std::nan(""));
  const auto grads = to_space(host_grads);
  optim::adamw<bf16, space> optimizer(n);
  optimizer.initialize(params.view(), ex);
  const auto before = as_doubles(params);
  train_step(controller, optimizer, params.view(), grads.view(), ex);
  CHECK(controller.scalars().read_skip());
  CHECK(controller.step_for_host() == 0);
  CHECK(controller.loss_scale_for_host() == 1.0f);
  check_equal(as_doubles(params), before, "bf16 parameters after a NaN step");
  std::string names;
  controller.for_each_state([&](const char* name, const auto& state) {
    names += std::string(name) + " ";
    CHECK(state.size() == 1);
  });
  CHECK(names == "step loss_scale clean_steps ");
  std::vector<optim::state_domain> domains;
  controller.for_each_state([&](const char*, const auto&, optim::state_domain d) { domains.push_back(d); });
  using optim::state_domain;
  CHECK(domains == std::vector{state_domain::step_count, state_domain::positive, state_domain::step_count});
}
