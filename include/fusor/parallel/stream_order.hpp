// fusor/parallel/stream_order.hpp — the order between the work that computes
// and the communication that moves its results, without the host waiting.
//
// On the host (host executor; comm::single or comm::mpi) computing is done when
// the call returns and a request's wait() is the order: nothing to do here.
// On the GPU the communicator queues its calls on its own stream (comm::nccl):
//   communication_after_compute: the communicator's stream waits (an event) for
//     what the compute stream has queued so far (the gradients it just wrote);
//   compute_after_communication: the compute stream waits for what the
//     communicator has queued so far (before the gradients are next read).
// Both are stream-ordered only, so a step stays free of host synchronisation.
// copy_in_order: a copy queued on the executor's stream (initialisation).
// refuse_graph_capture: data-parallel and pipeline steps cannot be recorded as a
// CUDA graph; they say so instead of invalidating the capture.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"

namespace fusor::parallel {

/// Whether a communicator queues its calls on a CUDA stream of its own.
template <class Communicator>
concept stream_ordered = requires(const Communicator& c) { c.stream(); };

/// Orders the compute stream and a communicator's stream against each other with CUDA events, without the
/// host waiting; on the host executor every call does nothing. Owns its events.
class stream_order {
 public:
  stream_order() = default;
  stream_order(const stream_order&) = delete;
  stream_order& operator=(const stream_order&) = delete;
  ~stream_order() {
#if FUSOR_HAS_CUDA
    if (computed_) (void)cudaEventDestroy(computed_);
    if (communicated_) (void)cudaEventDestroy(communicated_);
    for (cudaEvent_t e : marks_) (void)cudaEventDestroy(e);
#endif
  }

  /// Host: nothing to order (computing is done when the call returns).
  template <class Communicator>
  void communication_after_compute(const Communicator&, const host_executor&) {}
  /// Host: nothing to order (a request's wait() is the order).
  template <class Communicator>
  void compute_after_communication(const Communicator&, const host_executor&) {}
  /// Marks on the communicator's stream (ZeRO-2's gradient slabs): mark(slot)
  /// right after issuing a collective that reads slab `slot`;
  /// compute_after_mark(slot): the compute stream waits for that collective
  /// (and those queued before it), not for those issued since. On the host, nothing.
  template <class Communicator>
  void mark(const Communicator&, const host_executor&, std::size_t) {}
  /// Host: nothing to order (see mark()).
  template <class Communicator>
  void compute_after_mark(const Communicator&, const host_executor&, std::size_t) {}

#if FUSOR_HAS_CUDA
  /// The communicator's stream waits (an event) for what the executor's stream has queued so far.
  template <class Communicator>
  void communication_after_compute(const Communicator& c, const cuda_executor& ex) {
    static_assert(stream_ordered<Communicator>,
                  "fusor: a step under the cuda executor needs a communicator with its own stream (fusor::comm::nccl)");
    make_events();
    FUSOR_CUDA_CHECK(cudaEventRecord(computed_, ex.stream));
    FUSOR_CUDA_CHECK(cudaStreamWaitEvent(c.stream(), computed_, 0));
  }
  /// The executor's stream waits (an event) for what the communicator has queued so far.
  template <class Communicator>
  void compute_after_communication(const Communicator& c, const cuda_executor& ex) {
    static_assert(stream_ordered<Communicator>,
                  "fusor: a step under the cuda executor needs a communicator with its own stream (fusor::comm::nccl)");
    make_events();
    FUSOR_CUDA_CHECK(cudaEventRecord(communicated_, c.stream()));
    FUSOR_CUDA_CHECK(cudaStreamWaitEvent(ex.stream, communicated_, 0));
  }

  /// Records mark `slot` on the communicator's stream, after the collectives queued so far.
  template <class Communicator>
  void mark(const Communicator& c, const cuda_executor&, std::size_t slot) {
    while (marks_.size() <= slot) {
      marks_.push_back(nullptr);
      FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&marks_.back(), cudaEventDisableTiming));
    }
    FUSOR_CUDA_CHECK(cudaEventRecord(marks_[slot], c.stream()));
  }
  /// The executor's stream waits for mark `slot` (nothing where that mark was never recorded).
  template <class Communicator>
  void compute_after_mark(const Communicator&, const cuda_executor& ex, std::size_t slot) {
    if (slot < marks_.size()) FUSOR_CUDA_CHECK(cudaStreamWaitEvent(ex.stream, marks_[slot], 0));
  }

 private:
  // Made at the first use (an eager step, before any graph capture), reused after:
  // a wait takes the event's most recent record at the time it is queued.
  void make_events() {
    if (computed_) return;
    FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&computed_, cudaEventDisableTiming));
    FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&communicated_, cudaEventDisableTiming));
  }
  cudaEvent_t computed_ = nullptr;
  cudaEvent_t communicated_ = nullptr;
  std::vector<cudaEvent_t> marks_;
#endif
};

/// A data-parallel or pipeline step asks its requests whether collectives are
/// done (test(): cudaEventQuery, to start the next bucket or message) while it
/// runs, which a CUDA graph cannot record. Called at the start of such a step:
/// a clear error where its stream is being captured. (optim::trainer's step, one
/// process, is capturable: graph/capture.hpp.) On the host, nothing.
inline void refuse_graph_capture(const host_executor&, const char*) {}
#if FUSOR_HAS_CUDA
/// Throws fusor::error, naming `who`, where the executor's stream is being captured into a CUDA graph.
inline void refuse_graph_capture(const cuda_executor& ex, const char* who) {
  cudaStreamCaptureStatus status{};
  FUSOR_CUDA_CHECK(cudaStreamIsCapturing(ex.stream, &status));
  if (status != cudaStreamCaptureStatusNone)
    throw error(std::string("fusor: ") + who +
                " cannot be captured in a CUDA graph: it asks the communicator whether collectives are done "
                "(cudaEventQuery) while the step runs. Run it eagerly; optim::trainer's step (one process) is "
                "the one that can be captured");
}
#endif

/// Blocks the host until the executor's queued work is done (initialisation only).
inline void wait_for(const host_executor&) {}
#if FUSOR_HAS_CUDA
/// Blocks the host until the executor's stream is done (initialisation only).
inline void wait_for(const cuda_executor& ex) { ex.synchronize(); }
#endif

/// A copy ordered on the executor's stream (a plain copy on the host): a copy
/// between device buffers is otherwise queued on the legacy default stream,
/// which a non-blocking compute stream does not wait for.
template <class Dst, class Src>
void copy_in_order(const Dst& dst, const Src& src, const host_executor&) {
  copy(dst, src);
}
#if FUSOR_HAS_CUDA
/// `src` into `dst`, queued on the executor's stream (copy_async).
template <class Dst, class Src>
void copy_in_order(const Dst& dst, const Src& src, const cuda_executor& ex) {
  copy_async(dst, src, ex.stream);
}
#endif

}  // namespace fusor::parallel
