// Learning-rate schedules: the formulas at step 0, the end of warmup, the
// middle and end of the cosine and past the end; and the learning rate the
// controller decides on the device, step by step, from its own step count.
#include <vector>

#include "optim/optim_support.hpp"

using namespace optim_test;

FUSOR_TEST_CASE("schedule: constant and warmup + cosine against the formulas") {
  const auto constant = optim::learning_rate_schedule::constant(3e-4f);
  for (index_t s : {0, 1, 1000, 1000000}) CHECK(constant(s) == 3e-4f);

  const double peak = 0.1, final_lr = 0.004;
  const index_t warmup = 10, total = 110;
  const auto schedule = optim::learning_rate_schedule::warmup_cosine(float(peak), warmup, total, float(final_lr));
  const double tol = 1e-6;
  CHECK(close(schedule(0), peak / 10.0, tol));      // first warmup step: peak / W
  CHECK(close(schedule(4), peak * 5.0 / 10.0, tol));
  CHECK(close(schedule(9), peak, tol));             // warmup reaches the peak
  CHECK(close(schedule(10), peak, tol));            // cosine starts at the peak
  CHECK(close(schedule(60), (peak + final_lr) / 2.0, tol));  // half way: the mean
  CHECK(close(schedule(35), final_lr + (peak - final_lr) * (1.0 + std::cos(M_PI / 4.0)) / 2.0, tol));
  CHECK(close(schedule(110), final_lr, tol));       // the end
  CHECK(close(schedule(100000), final_lr, tol));    // and after it
  for (index_t s = 0; s < 130; ++s)
    CHECK(close(schedule(s), warmup_cosine_reference(peak, warmup, total, final_lr, s), tol));

  // No warmup: the cosine starts at step 0; final_lr defaults to 0.
  const auto no_warmup = optim::learning_rate_schedule::warmup_cosine(0.5f, 0, 4);
  CHECK(close(no_warmup(0), 0.5, tol));
  CHECK(close(no_warmup(2), 0.25, tol));
  CHECK(close(no_warmup(4), 0.0, tol));

  expect_error<fusor::error>([] { optim::learning_rate_schedule::warmup_cosine(0.1f, 10, 5); }, {"warmup_steps"});
}

FUSOR_TEST_CASE("schedule: the controller evaluates it on the device from the step count") {
  executor ex{};
  const auto schedule = optim::learning_rate_schedule::warmup_cosine(0.05f, 3, 9, 0.001f);
  optim::update_controller<space> controller(schedule, {}, {}, ex_stream(ex));
  for (index_t s = 0; s < 12; ++s) {
    controller.begin_step(ex);
    controller.prepare_update(ex);
    CHECK(controller.scalars().read_step() == s);
    CHECK(close(controller.scalars().read_learning_rate(), warmup_cosine_reference(0.05, 3, 9, 0.001, s), 1e-6));
    controller.finish_step(ex);
  }
  CHECK(controller.step_for_host() == 12);
}
