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

#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/config.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/optim/gradient_norm.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/schedule.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

struct clip_options {
  float max_norm = 0.0f;  // 0: no clipping
};

struct loss_scaling {
  bool dynamic = false;
  float initial_scale = 65536.0f;  // 2^16
  index_t growth_interval = 2000;
  float growth_factor = 2.0f;
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

template <class Space = host_space>
class update_controller {
 public:
  explicit update_controller(learning_rate_schedule schedule, clip_options clip = {}, loss_scaling scaling = {},
                             stream_t stream = {})
      : schedule_(schedule), clip_(clip), scaling_(scaling), scalars_(stream), workspace_(stream) {
    if (clip.max_norm < 0.0f) throw error("fusor: clip_options::max_norm must be >= 0 (0: no clipping)");
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

  template <class Ex>
  void begin_step(const Ex& executor) {
    run_task(detail::begin_step_task{scalars_.values()}, executor);
  }
  // Adds this buffer's sum of squares (as stored: scaled by the loss scale).
  template <class GradView, class Ex>
  void accumulate_gradient_norm(const GradView& grads, const Ex& executor) {
    add_sum_of_squares(&scalars_.values()->gradient_norm_squared, as_view(grads), workspace_, executor);
  }
  template <class Ex>
  void prepare_update(const Ex& executor) {
    run_task(detail::prepare_update_task{scalars_.values(), schedule_, clip_.max_norm, stop_on_nonfinite_}, executor);
  }
  template <class Ex>
  void finish_step(const Ex& executor) {
    run_task(detail::finish_step_task{scalars_.values(), scaling_}, executor);
  }

  // Inf/NaN gradients stop training (noted in stopped_at_step, every later
  // step skipped) instead of skipping that step alone.
  void stop_on_nonfinite(bool stop) { stop_on_nonfinite_ = stop; }
  bool stops_on_nonfinite() const { return stop_on_nonfinite_; }

  step_scalars<Space>& scalars() { return scalars_; }
  const step_scalars<Space>& scalars() const { return scalars_; }
  // For logging, outside the step: each copies to the host and waits.
  float loss_scale_for_host() const { return scalars_.read_loss_scale(); }
  std::int64_t step_for_host() const { return scalars_.read_step(); }

  // What a checkpoint keeps of the controller: fn(name, rank-0 view), names stable.
  template <class Fn>
  void for_each_state(Fn&& fn) const {
    fn("step", scalars_.step());
    fn("loss_scale", scalars_.loss_scale());
    fn("clean_steps", scalars_.clean_steps());
  }

  const learning_rate_schedule& schedule() const { return schedule_; }
  const clip_options& clipping() const { return clip_; }
  const loss_scaling& scaling() const { return scaling_; }

 private:
  learning_rate_schedule schedule_;
  clip_options clip_;
  loss_scaling scaling_;
  step_scalars<Space> scalars_;
  gradient_norm_workspace<Space> workspace_;
  bool stop_on_nonfinite_ = false;
};

}  // namespace fusor::optim
