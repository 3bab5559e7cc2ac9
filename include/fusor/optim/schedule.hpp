// fusor/optim/schedule.hpp — learning-rate schedules: constant, and linear
// warmup followed by cosine decay.
//
// A schedule is a small trivially copyable value evaluated inside a kernel
// from the device-resident step count (and on the host in tests and logs), so
// a captured training step picks up each step's learning rate by itself.
//
// warmup_cosine(peak, W, T, final), at step s (0-based, optimizer steps applied
// so far), as in llm.c:
//   s <  W:       peak * (s + 1) / W          (the first step is not wasted at 0)
//   W <= s < T:   final + (peak - final) * (1 + cos(pi * (s - W) / (T - W))) / 2
//   s >= T:       final
#pragma once

#include <string>

#include <cuda/std/cmath>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"

namespace fusor::optim {

/// A learning-rate schedule: constant, or linear warmup followed by cosine decay (see warmup_cosine).
struct learning_rate_schedule {
  /// The schedule's shape.
  enum class kind { constant, warmup_cosine };
  /// Which formula operator() evaluates.
  kind shape = kind::constant;
  /// The learning rate at the end of warmup (constant: the learning rate).
  float peak_learning_rate = 0.0f;
  /// The learning rate from total_steps on.
  float final_learning_rate = 0.0f;
  /// Steps of linear warmup, from peak / warmup_steps up to the peak.
  index_t warmup_steps = 0;
  /// The step at which the cosine decay reaches final_learning_rate.
  index_t total_steps = 0;

  /// `learning_rate` at every step.
  static learning_rate_schedule constant(float learning_rate) {
    return {kind::constant, learning_rate, learning_rate, 0, 0};
  }
  /// Linear warmup over `warmup_steps` (peak * (s + 1) / W at step s), then cosine decay to
  /// `final_learning_rate` at `total_steps`, as in llm.c. Throws fusor::error unless
  /// 0 <= warmup_steps <= total_steps.
  static learning_rate_schedule warmup_cosine(float peak_learning_rate, index_t warmup_steps, index_t total_steps,
                                              float final_learning_rate = 0.0f) {
    if (warmup_steps < 0 || total_steps < warmup_steps)
      throw error("fusor: warmup_cosine needs 0 <= warmup_steps <= total_steps (got " + std::to_string(warmup_steps) +
                  " and " + std::to_string(total_steps) + ")");
    return {kind::warmup_cosine, peak_learning_rate, final_learning_rate, warmup_steps, total_steps};
  }

  /// The learning rate at `step` (0-based: optimizer steps applied so far), on the host or in a kernel.
  FUSOR_HOST_DEVICE float operator()(index_t step) const {
    if (shape == kind::constant) return peak_learning_rate;
    if (step < warmup_steps) return peak_learning_rate * float(step + 1) / float(warmup_steps);
    if (step >= total_steps) return final_learning_rate;
    const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
    const double pi = 3.14159265358979323846;
    const double coefficient = 0.5 * (1.0 + ::cuda::std::cos(pi * progress));
    return float(double(final_learning_rate) + coefficient * double(peak_learning_rate - final_learning_rate));
  }
};

}  // namespace fusor::optim
