// fusor/core/stream_binding.hpp — orders a long-lived object's device memory
// with the streams that use it.
//
// Device memory comes from a stream-ordered pool (core/memory.hpp): it is
// allocated, zeroed and freed in the order of the stream it was made on, the
// object's "home" stream (network_options::stream, trainer_options::stream). A
// kernel on another stream is not ordered with those: it could read memory not
// yet handed out, and the free at the end could return memory a kernel still
// reads. A stream_binding closes both gaps:
//
//   binding.use_on(executor_stream(ex));  // before work on ex's stream: waits for the
//                                         // home stream's allocations and memsets, and
//                                         // for the previous user stream's work
//   ~stream_binding()                     // the home stream waits for the last user,
//                                         // so the frees that follow come after it
//
// Declare it after the memory it guards, so it is destroyed first. Nothing is
// waited on by the host; when the executor runs on the home stream (the common
// case) use_on does nothing at all. The first use on a new stream must happen
// before a CUDA-graph capture (run the step once eagerly, as graph/capture.hpp
// asks anyway): a captured stream cannot wait on an event recorded outside it.
#pragma once

#include <exception>
#include <type_traits>
#include <utility>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"

namespace fusor {

/// The stream an executor queues its work on ({} for the host executor).
template <class Executor>
stream_t executor_stream(const Executor& ex) {
  if constexpr (requires { ex.stream; }) return ex.stream;
  else return {};
}

/// Orders memory of `Space` made on a home stream with the other streams that use it; move-only.
///
/// Does nothing unless `Space` is device-accessible and the unit is compiled by nvcc.
template <class Space>
class stream_binding {
 public:
  /// Binds memory allocated on `home`, which is also its first user.
  explicit stream_binding(stream_t home = {}) : home_(home), last_(home) {}
  stream_binding(const stream_binding&) = delete;
  stream_binding& operator=(const stream_binding&) = delete;
  /// Takes over `other`'s binding; `other` is left bound to its home stream alone.
  stream_binding(stream_binding&& other) noexcept
      : home_(other.home_), last_(std::exchange(other.last_, other.home_)), event_(std::exchange(other.event_, {})) {}
  /// Makes the home stream wait for this binding's last user, then takes over `other`'s binding.
  stream_binding& operator=(stream_binding&& other) noexcept {
    if (this != &other) {
      release();
      home_ = other.home_;
      last_ = std::exchange(other.last_, other.home_);
      event_ = std::exchange(other.event_, {});
    }
    return *this;
  }
  ~stream_binding() { release(); }

  /// The stream the memory was allocated on.
  stream_t home() const { return home_; }
  /// The stream the memory was last used on (home until another is used).
  stream_t last_user() const { return last_; }

  /// Call before queueing work on `stream`: if it differs from the last user, it waits for the last user's
  /// work (for the first foreign use: the home stream's allocations and memsets); throws cuda_error.
  void use_on([[maybe_unused]] stream_t stream) {
#if FUSOR_HAS_CUDA
    if constexpr (Space::device_accessible) {
      if (stream == last_) return;
      // `stream` waits for what came before on the last user's stream (for the
      // first foreign use: the home stream's allocations and memsets).
      wait(stream, last_);
      last_ = stream;
    }
#endif
  }

 private:
  void release() noexcept {
#if FUSOR_HAS_CUDA
    if constexpr (Space::device_accessible) {
      if (last_ == home_) return;
      try {
        wait(home_, last_);
      } catch (const std::exception&) {
        // Destructors cannot throw; the context is broken if this fails, and the
        // next checked call says so.
      }
      if (event_) cudaEventDestroy(event_);
      event_ = {};
      last_ = home_;
    }
#endif
  }
#if FUSOR_HAS_CUDA
  void wait(stream_t waiter, stream_t waited) {
    if (!event_) FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    FUSOR_CUDA_CHECK(cudaEventRecord(event_, waited));
    FUSOR_CUDA_CHECK(cudaStreamWaitEvent(waiter, event_, 0));
  }
#endif
  stream_t home_;
  stream_t last_;
#if FUSOR_HAS_CUDA
  cudaEvent_t event_{};
#else
  void* event_ = nullptr;
#endif
};

}  // namespace fusor
