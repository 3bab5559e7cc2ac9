// fusor/optim/update_controller.hpp — the per-step decisions every optimizer
// shares: the global gradient norm and clipping, the Inf/NaN check that skips
// a step, the dynamic loss scale of fp16 training, the learning rate of the
// schedule and the step count. All of it stays in device memory
// (step_scalars), decided by one-thread tasks on the executor's stream: no
// host synchronisation, nothing allocated, nothing read from the host that
// changes from step to step, so a whole step can be captured as a CUDA graph.
//
// One training step:
//   controller.begin_step(ex);                           // norm^2 = 0
//   (forward; backward of loss * scalar(controller.scalars().loss_scale()))
//   controller.accumulate_gradient_norm(grads, ex);      // once per gradient buffer
//   controller.prepare_update(ex);                       // skip, multiplier, learning rate
//   optimizer.step(params, grads, controller.scalars(), ex);   // once per buffer
//   pruning.apply(params, ex);                           // optional
//   controller.finish_step(ex);                          // step count, loss scale
//
// prepare_update, with ||g|| the global norm of the gradients as stored
// (scaled by the loss scale s):
//   skip                = ||g|| is not finite (some gradient is Inf or NaN)
//   learning_rate       = schedule(step)
//   gradient_multiplier = (1 / s) * min(1, max_norm / (||g|| / s + 1e-6))
//                         (PyTorch's clip_grad_norm_ on unscaled gradients; no
//                         clipping when max_norm is 0; 0 on a skipped step)
// With stop_on_nonfinite (optim::trainer's default without a dynamic loss
// scale) the first step whose norm is not finite is noted in stopped_at_step
// and every step from it on is skipped: the parameters stay those before it,
// and the trainer reports it as an error (it reads the note on the host).
// finish_step: step += !skip; with dynamic loss scaling (PyTorch's GradScaler):
//   on skip s *= backoff_factor and the clean count restarts; otherwise the
//   clean count grows and at growth_interval s *= growth_factor (kept finite)
//   and the count restarts. Without dynamic scaling s stays 1.
// Skipping needs the gradients' norm: call accumulate_gradient_norm for every
// buffer whenever clipping or fp16 is used (without it the norm is 0). A
// controller's calls go to one stream, in order: its norm scratch is shared.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/config.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/optim/flat_state.hpp"
#include "fusor/optim/gradient_norm.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/schedule.hpp"
#include "fusor/optim/state_domain.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

/// Clipping of the gradients by their global norm (PyTorch's clip_grad_norm_).
struct clip_options {
  float max_norm = 0.0f;  ///< the most the unscaled gradients' global norm may be; 0: no clipping
};

/// Dynamic loss scaling for fp16 training (PyTorch's GradScaler).
struct loss_scaling {
  /// Scale the loss dynamically; without it the scale stays 1.
  bool dynamic = false;
  float initial_scale = 65536.0f;  ///< the scale of the first step: 2^16
  /// Steps in a row without Inf/NaN gradients after which the scale grows; >= 1.
  index_t growth_interval = 2000;
  /// What the scale is multiplied by when it grows (if the result is finite); >= 1.
  float growth_factor = 2.0f;
  /// What the scale is multiplied by after a step with Inf/NaN gradients; in (0, 1).
  float backoff_factor = 0.5f;
};

namespace detail {
struct begin_step_task {
  step_values* values;
  FUSOR_HOST_DEVICE void operator()() const { values->gradient_norm_squared = 0.0; }
};

struct prepare_update_task {
  step_values* values;
  learning_rate_schedule schedule;
  float max_norm;
  bool stop_on_nonfinite;
  FUSOR_HOST_DEVICE void operator()() const {
    const double norm_squared = values->gradient_norm_squared;
    // False for NaN and for +Inf: the comparison is the finiteness test.
    bool finite = norm_squared <= ::cuda::std::numeric_limits<double>::max();
    if (!finite && stop_on_nonfinite && values->stopped_at_step == 0) values->stopped_at_step = values->step + 1;
    finite = finite && values->stopped_at_step == 0;  // stopped: every later step is skipped too
    const double inverse_scale = 1.0 / double(values->loss_scale);
    double clip = 1.0;
    if (max_norm > 0.0f) {
      const double norm = ::cuda::std::sqrt(norm_squared) * inverse_scale;
      clip = ::cuda::std::fmin(1.0, double(max_norm) / (norm + 1e-6));
    }
    values->skip = finite ? 0.0f : 1.0f;
    values->gradient_multiplier = finite ? float(inverse_scale * clip) : 0.0f;
    values->learning_rate = schedule(values->step);
  }
};

struct finish_step_task {
  step_values* values;
  loss_scaling scaling;
  FUSOR_HOST_DEVICE void operator()() const {
    const bool skipped = values->skip != 0.0f;
    if (!skipped) values->step += 1;
    if (!scaling.dynamic) return;
    if (skipped) {
      values->loss_scale *= scaling.backoff_factor;
      values->clean_steps = 0;
    } else if (++values->clean_steps >= scaling.growth_interval) {
      const float grown = values->loss_scale * scaling.growth_factor;
      if (grown <= ::cuda::std::numeric_limits<float>::max()) values->loss_scale = grown;
      values->clean_steps = 0;
    }
  }
};
}  // namespace detail

/// The per-step decisions every optimizer shares (global gradient norm, clipping, Inf/NaN skip, dynamic loss
/// scale, learning rate, step count), kept in step_scalars in `Space` and made by one-thread tasks on the
/// executor's stream: nothing waits, so a step can be captured as a CUDA graph.
template <class Space = host_space>
class update_controller {
 public:
  /// Writes the first step's values (loss scale, learning rate schedule(0)) on `stream` and waits. Throws
  /// fusor::error for max_norm < 0 or NaN, a learning rate that is negative or not finite, or, with dynamic
  /// scaling, a loss_scaling out of range.
  explicit update_controller(learning_rate_schedule schedule, clip_options clip = {}, loss_scaling scaling = {},
                             stream_t stream = {})
      : schedule_(schedule), clip_(clip), scaling_(scaling), scalars_(stream), workspace_(stream) {
    if (!(clip.max_norm >= 0.0f))  // NaN too: it would mean no clipping without a word
      throw error("fusor: clip_options::max_norm must be >= 0 (0: no clipping), got " +
                  std::to_string(clip.max_norm));
    for (const float rate : {schedule.peak_learning_rate, schedule.final_learning_rate})
      if (!std::isfinite(rate) || rate < 0.0f)
        throw error("fusor: the learning-rate schedule's rates must be finite and >= 0, got " + std::to_string(rate) +
                    " (peak " + std::to_string(schedule.peak_learning_rate) + ", final " +
                    std::to_string(schedule.final_learning_rate) + ")");
    if (scaling.dynamic && (!(scaling.initial_scale > 0.0f) || scaling.growth_interval < 1 ||
                            !(scaling.growth_factor >= 1.0f) || !(scaling.backoff_factor > 0.0f) ||
                            !(scaling.backoff_factor < 1.0f)))
      throw error("fusor: loss_scaling needs initial_scale > 0, growth_interval >= 1, growth_factor >= 1 and "
                  "0 < backoff_factor < 1");
    step_values start;
    start.loss_scale = scaling.dynamic ? scaling.initial_scale : 1.0f;
    start.learning_rate = schedule(0);
    scalars_.write(start);
  }

  /// Starts a step: the squared gradient norm becomes 0.
  template <class Ex>
  void begin_step(const Ex& executor) {
    run_task(detail::begin_step_task{scalars_.values()}, executor);
  }
  /// Adds this buffer's sum of squares (as stored: scaled by the loss scale).
  template <class GradView, class Ex>
  void accumulate_gradient_norm(const GradView& grads, const Ex& executor) {
    add_sum_of_squares(&scalars_.values()->gradient_norm_squared, as_view(grads), workspace_, executor);
  }
  /// Decides, from the norm, what the optimizers read: skip (the norm is not finite, or training stopped),
  /// the gradient multiplier (1 / loss scale times the clip coefficient; 0 on skip) and the learning rate
  /// schedule(step).
  template <class Ex>
  void prepare_update(const Ex& executor) {
    run_task(detail::prepare_update_task{scalars_.values(), schedule_, clip_.max_norm, stop_on_nonfinite_}, executor);
  }
  /// Ends a step: counts it unless skipped and, with dynamic scaling, backs the loss scale off after a skip or
  /// grows it after growth_interval clean steps.
  template <class Ex>
  void finish_step(const Ex& executor) {
    run_task(detail::finish_step_task{scalars_.values(), scaling_}, executor);
  }

  /// Inf/NaN gradients stop training (noted in stopped_at_step, every later
  /// step skipped) instead of skipping that step alone.
  void stop_on_nonfinite(bool stop) { stop_on_nonfinite_ = stop; }
  /// Whether Inf/NaN gradients stop training (see stop_on_nonfinite).
  bool stops_on_nonfinite() const { return stop_on_nonfinite_; }

  /// The step's values, which the optimizers' passes read.
  step_scalars<Space>& scalars() { return scalars_; }
  /// The step's values, which the optimizers' passes read.
  const step_scalars<Space>& scalars() const { return scalars_; }
  /// The loss scale, for logging outside the step: copies to the host and waits.
  float loss_scale_for_host() const { return scalars_.read_loss_scale(); }
  /// The step count, for logging outside the step: copies to the host and waits.
  std::int64_t step_for_host() const { return scalars_.read_step(); }

  /// What a checkpoint keeps of the controller: fn(name, rank-0 view), or fn(name, view, state_domain) where fn
  /// takes the domain; names stable.
  template <class Fn>
  void for_each_state(Fn&& fn) const {
    detail::visit_state(fn, "step", scalars_.step(), state_domain::step_count);
    detail::visit_state(fn, "loss_scale", scalars_.loss_scale(), state_domain::positive);
    detail::visit_state(fn, "clean_steps", scalars_.clean_steps(), state_domain::step_count);
  }

  /// The learning-rate schedule it was made with.
  const learning_rate_schedule& schedule() const { return schedule_; }
  /// The clipping it was made with.
  const clip_options& clipping() const { return clip_; }
  /// The loss scaling it was made with.
  const loss_scaling& scaling() const { return scaling_; }

 private:
  learning_rate_schedule schedule_;
  clip_options clip_;
  loss_scaling scaling_;
  step_scalars<Space> scalars_;
  gradient_norm_workspace<Space> workspace_;
  bool stop_on_nonfinite_ = false;
};

/// values *= factor (a scalar in Space): the gradient of the loss times a dynamic loss scale, one pass.
template <class E, class S, class Executor>
void multiply_by(const flat_view<E, S>& values, const scalar_operand<float, S>& factor, const Executor& executor) {
  assign(values, values * factor, executor);
}

// The controller's launches, compiled once (its tasks, the gradient norm and
// the loss scale's pass, for fp32 and bf16): the host's in fusor::runtime
// (src/optim.cpp), the GPU's in fusor::cuda_runtime (src/cuda/optim.cu).
// PREFIX is `extern` for the declarations here.
#define FUSOR_CONTROLLER_HOST_INSTANCES(PREFIX)                                                                    \
  PREFIX template void add_sum_of_squares<float, host_space>(double*, const flat_view<float, host_space>&,        \
                                                             const gradient_norm_workspace<host_space>&,          \
                                                             const host_executor&);                               \
  PREFIX template void multiply_by<float, host_space, host_executor>(                                             \
      const flat_view<float, host_space>&, const scalar_operand<float, host_space>&, const host_executor&)
#define FUSOR_CONTROLLER_CUDA_INSTANCES(PREFIX)                                                                    \
  PREFIX template void run_task<detail::begin_step_task>(const detail::begin_step_task&, const cuda_executor&);     \
  PREFIX template void run_task<detail::prepare_update_task>(const detail::prepare_update_task&,                   \
                                                             const cuda_executor&);                                \
  PREFIX template void run_task<detail::finish_step_task>(const detail::finish_step_task&, const cuda_executor&);   \
  PREFIX template void add_sum_of_squares<float, device_space>(double*, const flat_view<float, device_space>&,    \
                                                               const gradient_norm_workspace<device_space>&,      \
                                                               const cuda_executor&);                             \
  PREFIX template void add_sum_of_squares<__nv_bfloat16, device_space>(                                           \
      double*, const flat_view<__nv_bfloat16, device_space>&, const gradient_norm_workspace<device_space>&,       \
      const cuda_executor&);                                                                                       \
  PREFIX template void multiply_by<float, device_space, cuda_executor>(                                           \
      const flat_view<float, device_space>&, const scalar_operand<float, device_space>&, const cuda_executor&);   \
  PREFIX template void multiply_by<__nv_bfloat16, device_space, cuda_executor>(                                   \
      const flat_view<__nv_bfloat16, device_space>&, const scalar_operand<float, device_space>&,                  \
      const cuda_executor&)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_CONTROLLER_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_CONTROLLER_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::optim
