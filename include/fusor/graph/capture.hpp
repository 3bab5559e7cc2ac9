// fusor/graph/capture.hpp — a training step recorded once as a CUDA graph and
// replayed: one launch for the hundreds of kernels of a small network's step,
// which removes the launch overhead that bounds small networks on a GPU.
//
//   fusor::graph::captured_step step;
//   step.capture(stream, [&] { trainer.step(inputs, labels, ex); });   // records, runs nothing
//   for (...) { copy_async(inputs, next_batch, stream); step.replay(); }
//
// Host-side bookkeeping inside the step (the trainer's step count) is written as
// graph::host_effect (host_effects.hpp): recorded at capture, repeated by replay.
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

#include <cstdio>
#include <exception>
#include <utility>

#include "fusor/config.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/graph/host_effects.hpp"

namespace fusor::graph {

#if FUSOR_HAS_CUDA

/// A training step recorded once as a CUDA graph and replayed with one launch; move-only, owns the graph.
class captured_step {
 public:
  captured_step() = default;
  captured_step(const captured_step&) = delete;
  captured_step& operator=(const captured_step&) = delete;
  /// Takes over `other`'s graph, stream and host effects; `other` is left with nothing captured.
  captured_step(captured_step&& other) noexcept
      : graph_(std::exchange(other.graph_, nullptr)), instance_(std::exchange(other.instance_, nullptr)),
        stream_(other.stream_), effects_(std::move(other.effects_)) {}
  /// Releases this step's graph, then takes over `other`'s; `other` is left with nothing captured.
  captured_step& operator=(captured_step&& other) noexcept {
    if (this != &other) {
      release();
      graph_ = std::exchange(other.graph_, nullptr);
      instance_ = std::exchange(other.instance_, nullptr);
      stream_ = other.stream_;
      effects_ = std::move(other.effects_);
    }
    return *this;
  }
  ~captured_step() { release(); }

  /// Records what `work()` enqueues on `stream` (which must not be the legacy
  /// default stream: capture needs a created stream). Nothing executes. Host
  /// effects made inside (graph::host_effect, e.g. the trainer's step count) are
  /// recorded too and repeated by every replay. Replaces any earlier capture;
  /// throws fusor::error for a null stream, and rethrows what `work` throws
  /// after ending the capture.
  template <class Work>
  void capture(stream_t stream, Work&& work) {
    if (stream == nullptr)
      throw error("fusor::graph::captured_step: capture needs a created stream (cudaStreamCreate), not the default stream");
    release();
    stream_ = stream;
    FUSOR_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      recording_host_effects recording(effects_);
      std::forward<Work>(work)();
    } catch (const std::exception& e) {
      end_abandoned_capture(stream, e.what());
      throw;
    } catch (...) {
      end_abandoned_capture(stream, "an exception that is not a std::exception");
      throw;
    }
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
    if (ended != cudaSuccess) {
      release();
      gpu::check(ended, "cudaStreamEndCapture (the captured work used the stream in a way a graph cannot record, "
                         "e.g. a synchronisation, a host read of device memory or a copy on the legacy default stream)",
                  __FILE__, __LINE__);
    }
    FUSOR_CUDA_CHECK(cudaGraphInstantiate(&instance_, graph_, 0));
  }

  /// Enqueues the recorded step on the stream it was captured from, and repeats
  /// the host effects recorded with it. Throws fusor::error when nothing has been captured.
  void replay() {
    if (instance_ == nullptr) throw error("fusor::graph::captured_step::replay: nothing has been captured");
    FUSOR_CUDA_CHECK(cudaGraphLaunch(instance_, stream_));
    effects_.replay();
  }

  /// How many host effects each replay repeats.
  std::size_t host_effect_count() const { return effects_.size(); }
  /// Whether a step has been captured and can be replayed.
  bool captured() const { return instance_ != nullptr; }
  /// How many kernels and copies one replay runs (what the graph saves in launches).
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
    effects_.clear();
  }
  // The work threw while capturing: end the capture so the stream is usable
  // again. The work's exception is what the caller sees; a failure to end the
  // capture (usually "invalidated", a consequence of the same fault) is said on
  // stderr rather than dropped, and its record cleared so that the next launch
  // is not blamed for it.
  static void end_abandoned_capture(stream_t stream, const char* why) noexcept {
    cudaGraph_t abandoned = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &abandoned);
    if (abandoned) cudaGraphDestroy(abandoned);
    if (ended != cudaSuccess) {
      gpu::forget_reported_error();
      std::fprintf(stderr, "fusor::graph::captured_step: the captured work threw (%s); ending the capture then "
                   "reported %s (%s)\n", why, cudaGetErrorName(ended), cudaGetErrorString(ended));
    }
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t instance_ = nullptr;
  stream_t stream_ = nullptr;
  host_effect_record effects_;
};

#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::graph
