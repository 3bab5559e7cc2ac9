// fusor/optim/nonfinite_note.hpp — how the host learns, without waiting for
// the GPU, that a controller stopped training on Inf/NaN gradients
// (step_values::stopped_at_step, update_controller.hpp).
//
// On the host the note is the step scalars themselves, read as they are. On a
// GPU each step ends with a stream-ordered copy of the note into pinned host
// memory (a plain memcpy node, so a captured step records it too), and the host
// reads that copy: it holds the note of the last step the GPU finished, never
// a value the host had to wait for.
#pragma once

#include <cstdint>

#include "fusor/config.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

template <class Space>
class nonfinite_note {
 public:
  nonfinite_note() {
#if FUSOR_HAS_CUDA
    if constexpr (!Space::host_accessible) {  // made here: a first step under capture must not allocate
      pinned_ = static_cast<std::int64_t*>(allocate<pinned_space>(sizeof(std::int64_t)));
      *pinned_ = 0;
    }
#endif
  }
  nonfinite_note(const nonfinite_note&) = delete;
  nonfinite_note& operator=(const nonfinite_note&) = delete;
  ~nonfinite_note() {
#if FUSOR_HAS_CUDA
    if (pinned_ != nullptr) deallocate<pinned_space>(const_cast<std::int64_t*>(pinned_));
#endif
  }

  // After a step's finish_step: nothing to copy on the host.
  void record(const step_scalars<Space>&, const host_executor&) {}
#if FUSOR_HAS_CUDA
  void record(const step_scalars<Space>& scalars, const cuda_executor& ex) {
    if (pinned_ == nullptr) return;  // host-accessible scalars: read directly
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(const_cast<std::int64_t*>(pinned_), &scalars.values()->stopped_at_step,
                                     sizeof(std::int64_t), cudaMemcpyDeviceToHost, ex.stream));
  }
#endif

  // The step that stopped training (1-based), or 0: as of the latest step
  // finished (host: the one just taken).
  std::int64_t seen(const step_scalars<Space>& scalars) const {
    if (pinned_ != nullptr) return *pinned_;
    if constexpr (Space::host_accessible) return scalars.values()->stopped_at_step;
    return 0;
  }

 private:
  volatile std::int64_t* pinned_ = nullptr;  // written by the GPU's copies
};

}  // namespace fusor::optim
