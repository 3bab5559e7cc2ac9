// fusor/graph/capture.hpp — a training step recorded once as a CUDA graph and
// replayed: one launch for the hundreds of kernels of a small network's step,
// which removes the launch overhead that bounds small networks on a GPU.
//
//   fusor::graph::captured_step step;
//   step.capture(stream, [&] { trainer.step(inputs, labels, ex); });   // records, runs nothing
//   for (...) { copy_async(inputs, next_batch, stream); step.replay(); }
//
// What a captured step may do is what a CUDA graph allows: launches and
// stream-ordered copies and allocations on the captured stream, no host
// synchronisation and no host reads of device values. Everything fusor's
// trainer does in a step follows those rules (ARCHITECTURE.md, decision 7):
// the learning rate, the step count and the loss scale live on the device.
// Pointers are baked in: a replay reads the same buffers, so new data is
// copied into them first. Work that has to be done once (cuBLASLt's plan
// choice, first-touch allocations) should run eagerly before capture: run the
// step once outside the graph first. Capture uses cudaStreamCaptureModeThreadLocal,
// so a loader thread copying on its own stream does not break it.
#pragma once

#include <utility>

#include "fusor/config.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/memory.hpp"

namespace fusor::graph {

#if FUSOR_HAS_CUDA

class captured_step {
 public:
  captured_step() = default;
  captured_step(const captured_step&) = delete;
  captured_step& operator=(const captured_step&) = delete;
  captured_step(captured_step&& other) noexcept
      : graph_(std::exchange(other.graph_, nullptr)), instance_(std::exchange(other.instance_, nullptr)),
        stream_(other.stream_) {}
  captured_step& operator=(captured_step&& other) noexcept {
    if (this != &other) {
      release();
      graph_ = std::exchange(other.graph_, nullptr);
      instance_ = std::exchange(other.instance_, nullptr);
      stream_ = other.stream_;
    }
    return *this;
  }
  ~captured_step() { release(); }

  // Records what `work()` enqueues on `stream` (which must not be the legacy
  // default stream: capture needs a created stream). Nothing executes.
  template <class Work>
  void capture(stream_t stream, Work&& work) {
    if (stream == nullptr)
      throw error("fusor::graph::captured_step: capture needs a created stream (cudaStreamCreate), not the default stream");
    release();
    stream_ = stream;
    FUSOR_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      std::forward<Work>(work)();
    } catch (...) {
      cudaGraph_t abandoned = nullptr;
      cudaStreamEndCapture(stream, &abandoned);  // leave the stream usable; the first error is what matters
      if (abandoned) cudaGraphDestroy(abandoned);
      throw;
    }
    FUSOR_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    FUSOR_CUDA_CHECK(cudaGraphInstantiate(&instance_, graph_, 0));
  }

  // Enqueues the recorded step on the stream it was captured from.
  void replay() const {
    if (instance_ == nullptr) throw error("fusor::graph::captured_step::replay: nothing has been captured");
    FUSOR_CUDA_CHECK(cudaGraphLaunch(instance_, stream_));
  }

  bool captured() const { return instance_ != nullptr; }
  // How many kernels and copies one replay runs (what the graph saves in launches).
  std::size_t node_count() const {
    std::size_t n = 0;
    if (graph_) FUSOR_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
    return n;
  }

 private:
  void release() noexcept {
    if (instance_) cudaGraphExecDestroy(instance_);
    if (graph_) cudaGraphDestroy(graph_);
    instance_ = nullptr;
    graph_ = nullptr;
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t instance_ = nullptr;
  stream_t stream_ = nullptr;
};

#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::graph
