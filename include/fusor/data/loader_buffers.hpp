// fusor/data/loader_buffers.hpp — the memory behind a loader's batch slots:
// host staging memory where the worker thread writes a batch (page-locked for
// batches bound to the device, so their copy is truly asynchronous), and, for
// batches delivered to the device, per-slot device buffers, the two events that
// order a slot's reuse, and the loader's own non-blocking copy stream.
//
// Everything CUDA sits behind FUSOR_HAS_CUDA: in a unit compiled by g++ only
// host staging memory exists.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"

namespace fusor::data::detail {

// Host memory a batch is prepared in: host_space for a loader<host_space>,
// page-locked (pinned_space) for a loader<device_space>, whose copies to the
// device are then truly asynchronous. The space is the type's, not a flag, so
// staging_buffer<host_space> is the same code under g++ and nvcc (one
// loader<host_space> serves both; see loader.hpp's instances).
template <class Space>
class staging_buffer {
 public:
  staging_buffer() = default;
  explicit staging_buffer(std::size_t bytes) : data_(allocate<Space>(bytes)) {}
  staging_buffer(const staging_buffer&) = delete;
  staging_buffer& operator=(const staging_buffer&) = delete;
  staging_buffer(staging_buffer&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}
  staging_buffer& operator=(staging_buffer&& other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~staging_buffer() { deallocate<Space>(data_); }

  template <class T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
};

// The device half of a loader<device_space> (defined below, with CUDA); a
// loader<host_space> holds an empty no_device_part instead, so its layout does
// not depend on the compiler.
struct device_part;
struct no_device_part {};

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

struct device_part {
  int device = 0;            // the GPU the loader was made on (the worker thread makes it current)
  owned_stream copy_stream;  // declared before the buffers freed on it
  std::vector<device_slot> slots;
};
#endif

}  // namespace fusor::data::detail
