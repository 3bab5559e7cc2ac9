// fusor/data/loader_buffers.hpp — the memory behind a loader's batch slots:
// host staging memory where the worker thread writes a batch (page-locked where
// a GPU can use it, so the copy to the device is truly asynchronous), and, for
// batches delivered to the device, per-slot device buffers, the two events that
// order a slot's reuse, and the loader's own non-blocking copy stream.
//
// Everything CUDA sits behind FUSOR_HAS_CUDA: in a unit compiled by g++ the
// staging memory is plain host memory and nothing else exists.
#pragma once

#include <cstddef>
#include <utility>

#include "fusor/config.hpp"
#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"

namespace fusor::data::detail {

// Pinned memory only helps (and only works) where nvcc compiled this unit and a GPU is present.
inline bool can_pin_memory() {
#if FUSOR_HAS_CUDA
  return gpu::available();
#else
  return false;
#endif
}

// Host memory a batch is prepared in: page-locked when asked, plain otherwise.
class staging_buffer {
 public:
  staging_buffer() = default;
  staging_buffer(std::size_t bytes, bool pinned) : pinned_(pinned) {
#if FUSOR_HAS_CUDA
    if (pinned_) {
      data_ = allocate<pinned_space>(bytes);
      return;
    }
#endif
    pinned_ = false;
    data_ = allocate<host_space>(bytes);
  }
  staging_buffer(const staging_buffer&) = delete;
  staging_buffer& operator=(const staging_buffer&) = delete;
  staging_buffer(staging_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), pinned_(other.pinned_) {}
  staging_buffer& operator=(staging_buffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(pinned_, other.pinned_);
    return *this;
  }
  ~staging_buffer() {
#if FUSOR_HAS_CUDA
    if (pinned_) {
      deallocate<pinned_space>(data_);
      return;
    }
#endif
    deallocate<host_space>(data_);
  }

  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  bool pinned() const { return pinned_; }

 private:
  void* data_ = nullptr;
  bool pinned_ = false;
};

#if FUSOR_HAS_CUDA
// A stream of the loader's own that never waits for the legacy default stream.
class owned_stream {
 public:
  owned_stream() = default;
  static owned_stream non_blocking() {
    owned_stream s;
    FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
    return s;
  }
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;
  owned_stream(owned_stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  owned_stream& operator=(owned_stream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  // Returns at once; the stream's queued work (frees included) still completes.
  ~owned_stream() {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An event used for ordering only (no timing: cheaper to record and wait on).
class owned_event {
 public:
  owned_event() { FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  owned_event(const owned_event&) = delete;
  owned_event& operator=(const owned_event&) = delete;
  owned_event(owned_event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  owned_event& operator=(owned_event&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~owned_event() {
    if (event_) (void)cudaEventDestroy(event_);
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// The device half of one batch slot. Waiting on an event never recorded is a
// no-op, so a fresh slot needs no special case.
struct device_slot {
  device_slot(std::size_t image_bytes, std::size_t label_bytes, cudaStream_t copy_stream)
      : images(image_bytes, copy_stream), labels(label_bytes, copy_stream) {}
  buffer<device_space> images, labels;  // allocated and freed in the copy stream's order
  owned_event copied;    // copy stream, after the slot's copy: the compute stream waits on it,
                         // and the worker before it overwrites the staging memory
  owned_event released;  // compute stream, when the consumer moves on: the copy stream waits
                         // on it before overwriting the device buffers
};
#endif

}  // namespace fusor::data::detail
