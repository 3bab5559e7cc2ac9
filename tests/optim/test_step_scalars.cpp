// The step's values in memory: step_scalars written and read back, a value
// broadcast into a fused pass with optim::scalar (the loss times the loss scale,
// as a trainer does; a linear pass, one launch), a one-thread task updating
// values in place, and the optimizers taking tensors as well as views.
#include <cstdint>

#include "optim/optim_support.hpp"

using namespace optim_test;

namespace {
// What a user's own per-step bookkeeping might be: halve the learning rate, count.
struct halve_and_count {
  optim::step_values* values;
  FUSOR_HOST_DEVICE void operator()() const {
    values->learning_rate *= 0.5f;
    values->clean_steps += 1;
  }
};
}  // namespace

FUSOR_TEST_CASE("step scalars: written, read back, broadcast and updated by a task") {
  executor ex{};
  optim::step_scalars<space> scalars(ex_stream(ex));
  const optim::step_values fresh = scalars.read();
  CHECK(fresh.step == 0);
  CHECK(fresh.loss_scale == 1.0f);
  CHECK(fresh.gradient_multiplier == 1.0f);

  optim::step_values v;
  v.gradient_norm_squared = 12.5;
  v.step = 41;
  v.clean_steps = 7;
  v.learning_rate = 0.25f;
  v.gradient_multiplier = 0.125f;
  v.skip = 1.0f;
  v.loss_scale = 512.0f;
  scalars.write(v);
  CHECK(scalars.read_gradient_norm_squared() == 12.5);
  CHECK(scalars.read_step() == 41);
  CHECK(scalars.read_clean_steps() == 7);
  CHECK(scalars.read_learning_rate() == 0.25f);
  CHECK(scalars.read_gradient_multiplier() == 0.125f);
  CHECK(scalars.read_skip());
  CHECK(scalars.read_loss_scale() == 512.0f);

  // loss * loss_scale, the scale read from memory by the pass itself.
  const index_t n = 1029;
  const auto host_loss = random_flat<float>(n, 5);
  const auto loss = to_space(host_loss);
  flat_space<float> scaled(n);
  poison(scaled);
  const auto before = launches();
  assign(scaled, loss * optim::scalar(scalars.loss_scale()), ex);
  if (counts_launches) CHECK(launches() - before == 1);
  finish(ex);
  const auto got = as_doubles(scaled);
  for (index_t i = 0; i < n; ++i) CHECK(got[std::size_t(i)] == double(host_loss.data()[i]) * 512.0);
  // The same leaf reads whatever the memory holds when the pass runs.
  v.loss_scale = 4.0f;
  scalars.write(v);
  assign(scaled, loss * optim::scalar(scalars.loss_scale()) + optim::scalar(scalars.step()), ex);
  finish(ex);
  const auto again = as_doubles(scaled);
  // x * 4 is exact in fp32, so the sum rounds once, fused or not.
  for (index_t i = 0; i < n; ++i) CHECK(again[std::size_t(i)] == double(host_loss.data()[i] * 4.0f + 41.0f));

  optim::run_task(halve_and_count{scalars.values()}, ex);
  optim::run_task(halve_and_count{scalars.values()}, ex);
  CHECK(scalars.read_learning_rate() == 0.0625f);
  CHECK(scalars.read_clean_steps() == 9);
}

FUSOR_TEST_CASE("optimizers take tensors as well as views") {
  const index_t n = 100;
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.1f), {}, {}, ex_stream(ex));
  const auto host_params = random_flat<fp16>(n, 7);
  auto params = to_space(host_params);
  const auto host_grads = random_flat<fp16>(n, 8);
  const auto grads = to_space(host_grads);
  optim::sgd<fp16, space> optimizer(n);
  optimizer.initialize(params, ex);
  controller.begin_step(ex);
  controller.accumulate_gradient_norm(grads, ex);
  controller.prepare_update(ex);
  optimizer.step(params, grads, controller.scalars(), ex);
  controller.finish_step(ex);
  const auto master = as_doubles(optimizer.master_weights());
  for (index_t i = 0; i < n; ++i) {
    const double want = convert<double>(host_params.data()[i]) - 0.1 * convert<double>(host_grads.data()[i]);
    CHECK(close(master[std::size_t(i)], want, 2e-6));
  }
  static_assert(optim::state_traits<fp16>::has_master_weights && !optim::state_traits<float>::has_master_weights);
  static_assert(std::is_same_v<optim::flat_view<fp16, space>, typename optim::sgd<fp16, space>::parameter_view>);
}
