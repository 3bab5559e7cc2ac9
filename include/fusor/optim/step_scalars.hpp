// fusor/optim/step_scalars.hpp — the values one training step decides and its
// kernels read: learning rate, gradient multiplier (unscale x clip), the skip
// flag, the squared gradient norm, the step count and the loss scale.
//
// They live in one small allocation in the step's memory space (device memory
// for GPU training), so no step ever reads a device value on the host or takes
// a host value that changes from step to step: the step can be captured as a
// CUDA graph and replayed. Each value is exposed as a rank-0 view (use
// scalar(view) from scalar_operand.hpp to broadcast it in a fused pass); the
// read_* functions copy to the host and wait, for logging outside the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <cuda/std/mdspan>

#include "fusor/core/buffer.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/view.hpp"

namespace fusor::optim {

/// The layout of the one allocation (host and device alike).
struct step_values {
  double gradient_norm_squared = 0.0;  ///< sum of squares of the (scaled) gradients of every buffer
  std::int64_t step = 0;               ///< optimizer steps applied so far (skipped steps do not count)
  std::int64_t clean_steps = 0;        ///< steps without Inf/NaN since the loss scale last changed
  float learning_rate = 0.0f;          ///< schedule(step), set by prepare_update
  float gradient_multiplier = 1.0f;    ///< (1 / loss_scale) * clip coefficient; 0 on a skipped step
  float skip = 0.0f;                   ///< 1: Inf/NaN in the gradients (or training stopped), this step changes nothing
  float loss_scale = 1.0f;             ///< what the loss is multiplied by before backward
  /// 0 while training goes on; N: step N (1-based) had Inf/NaN gradients under
  /// a controller that stops on them, and every step since changes nothing.
  std::int64_t stopped_at_step = 0;
};

/// A rank-0 view: one value of precision P in `Space`.
template <class P, class Space>
using scalar_view = view<P, ::cuda::std::extents<index_t>, row_major, Space>;

/// The step_values of one training step in one allocation in `Space`, each exposed as a rank-0 view for
/// kernels and copied to the host only by the read functions.
template <class Space = host_space>
class step_scalars {
 public:
  /// The memory space the values live in.
  using space = Space;

  /// Allocates the values on `stream` and writes step_values' defaults (waits for the copy).
  explicit step_scalars(stream_t stream = {}) : memory_(sizeof(step_values), stream) { write(step_values{}); }

  /// The learning rate of the step (step_values::learning_rate).
  scalar_view<float, Space> learning_rate() const { return field<float>(offsetof(step_values, learning_rate)); }
  /// What the optimizers multiply the gradients by (step_values::gradient_multiplier).
  scalar_view<float, Space> gradient_multiplier() const {
    return field<float>(offsetof(step_values, gradient_multiplier));
  }
  /// 1 when the step changes nothing, else 0 (step_values::skip).
  scalar_view<float, Space> skip() const { return field<float>(offsetof(step_values, skip)); }
  /// The sum of squares of the stored gradients (step_values::gradient_norm_squared).
  scalar_view<double, Space> gradient_norm_squared() const {
    return field<double>(offsetof(step_values, gradient_norm_squared));
  }
  /// Optimizer steps applied so far (step_values::step).
  scalar_view<std::int64_t, Space> step() const { return field<std::int64_t>(offsetof(step_values, step)); }
  /// What the loss is multiplied by before backward (step_values::loss_scale).
  scalar_view<float, Space> loss_scale() const { return field<float>(offsetof(step_values, loss_scale)); }
  /// Steps without Inf/NaN since the loss scale last changed (step_values::clean_steps).
  scalar_view<std::int64_t, Space> clean_steps() const {
    return field<std::int64_t>(offsetof(step_values, clean_steps));
  }
  /// The step that stopped training, or 0 (step_values::stopped_at_step).
  scalar_view<std::int64_t, Space> stopped_at_step() const {
    return field<std::int64_t>(offsetof(step_values, stopped_at_step));
  }

  /// Where the values are, for tasks that update several at once.
  step_values* values() const { return memory_.template as<step_values>(); }
  /// The stream the values were allocated on; read() and write() copy on it.
  stream_t stream() const { return memory_.stream(); }

  /// Copies to the host, waiting for the work queued on this object's stream.
  step_values read() const {
    step_values v;
    if constexpr (Space::host_accessible && !Space::device_accessible) {
      std::memcpy(&v, values(), sizeof v);
    } else {
#if FUSOR_HAS_CUDA
      FUSOR_CUDA_CHECK(cudaMemcpyAsync(&v, values(), sizeof v, cudaMemcpyDefault, stream()));
      FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream()));
#endif
    }
    return v;
  }
  /// read().learning_rate: copies to the host and waits.
  float read_learning_rate() const { return read().learning_rate; }
  /// read().gradient_multiplier: copies to the host and waits.
  float read_gradient_multiplier() const { return read().gradient_multiplier; }
  /// Whether read().skip is set: copies to the host and waits.
  bool read_skip() const { return read().skip != 0.0f; }
  /// read().gradient_norm_squared: copies to the host and waits.
  double read_gradient_norm_squared() const { return read().gradient_norm_squared; }
  /// read().step: copies to the host and waits.
  std::int64_t read_step() const { return read().step; }
  /// read().loss_scale: copies to the host and waits.
  float read_loss_scale() const { return read().loss_scale; }
  /// read().clean_steps: copies to the host and waits.
  std::int64_t read_clean_steps() const { return read().clean_steps; }
  /// read().stopped_at_step: copies to the host and waits.
  std::int64_t read_stopped_at_step() const { return read().stopped_at_step; }

  /// Replaces every value (construction, a restored checkpoint, tests); waits.
  void write(const step_values& v) {
    if constexpr (Space::host_accessible && !Space::device_accessible) {
      std::memcpy(values(), &v, sizeof v);
    } else {
#if FUSOR_HAS_CUDA
      FUSOR_CUDA_CHECK(cudaMemcpyAsync(values(), &v, sizeof v, cudaMemcpyDefault, stream()));
      FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream()));
#endif
    }
  }

 private:
  template <class T>
  scalar_view<T, Space> field(std::size_t offset) const {
    return scalar_view<T, Space>(reinterpret_cast<T*>(static_cast<char*>(memory_.data()) + offset));
  }
  buffer<Space> memory_;
};

}  // namespace fusor::optim
