// fusor/kernels/matmul_workspace.hpp — the scratch memory GPU matmuls run with:
// one workspace per (device, stream), so that a step that has run once
// allocates nothing and matmuls on different streams never wait for each other.
//
// A workspace is taken from the stream-ordered pool on its stream at the first
// matmul there, grown when a plan needs more (the old block freed on the same
// stream, after every earlier use), kept for later matmuls and freed at exit.
// A lease holds the workspace's lock from before the work is enqueued until
// after: host threads enqueueing on different streams use different
// workspaces concurrently; on the same stream their work is ordered anyway.
// Stream handles are keyed with the stream's unique id (cudaStreamGetId): when
// a destroyed stream's handle comes back for a new stream, or one handle names
// per-thread default streams, the new user first waits for the event recorded
// after the workspace's last use. While its stream is being captured into a
// CUDA graph a matmul takes a workspace of its own instead (a stream-ordered
// allocation inside the graph): a graph never holds a cached block that a later
// growth would free.
// Only translation units compiled by nvcc see this header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"

namespace fusor::detail {

class stream_workspaces {
  struct entry {
    std::mutex mutex;
    unsigned long long stream_id = 0;
    bool used = false;
    void* data = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t last_use = nullptr;  // recorded after every use
  };

 public:
  // The right to use `size()` bytes at `data()` for work enqueued on the
  // stream while the lease lives.
  class lease {
   public:
    lease(lease&& other) noexcept
        : entry_(std::exchange(other.entry_, nullptr)), lock_(std::move(other.lock_)), own_(std::move(other.own_)),
          stream_(other.stream_) {}
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    lease& operator=(lease&&) = delete;
    ~lease() {
      // Whatever was enqueued (all of it, or part before an exception) is covered.
      if (entry_ && cudaEventRecord(entry_->last_use, stream_) != cudaSuccess) gpu::forget_reported_error();
    }
    void* data() const { return entry_ ? entry_->data : own_.data(); }
    std::size_t size() const { return entry_ ? entry_->bytes : own_.size(); }
    bool cached() const { return entry_ != nullptr; }

   private:
    friend class stream_workspaces;
    lease(entry* e, std::unique_lock<std::mutex> lock, cudaStream_t stream)
        : entry_(e), lock_(std::move(lock)), stream_(stream) {}
    lease(buffer<device_space> own, cudaStream_t stream) : own_(std::move(own)), stream_(stream) {}
    entry* entry_ = nullptr;
    std::unique_lock<std::mutex> lock_;
    buffer<device_space> own_;
    cudaStream_t stream_ = nullptr;
  };

  stream_workspaces() = default;
  stream_workspaces(const stream_workspaces&) = delete;
  stream_workspaces& operator=(const stream_workspaces&) = delete;

  // At exit: every workspace back to the driver (cudaFree orders itself after
  // pending work); statuses ignored, the runtime may already be shutting down.
  ~stream_workspaces() {
    for (auto& [key, e] : entries_) {
      if (e->data && cudaFree(e->data) != cudaSuccess) gpu::forget_reported_error();
      if (e->last_use && cudaEventDestroy(e->last_use) != cudaSuccess) gpu::forget_reported_error();
    }
  }

  // At least `bytes` for work on `stream` of `device` (the current device).
  // A cached workspace grows to max(bytes, min(twice its size, limit)).
  lease acquire(int device, cudaStream_t stream, std::size_t bytes, std::size_t limit) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    FUSOR_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return lease(buffer<device_space>(bytes, stream), stream);

    unsigned long long id = 0;
    FUSOR_CUDA_CHECK(cudaStreamGetId(stream, &id));
    entry* const e = entry_for(device, stream);
    std::unique_lock lock(e->mutex);
    if (!e->last_use) FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&e->last_use, cudaEventDisableTiming));
    if (e->used && e->stream_id != id) FUSOR_CUDA_CHECK(cudaStreamWaitEvent(stream, e->last_use, 0));
    e->stream_id = id;
    e->used = true;
    if (bytes > e->bytes) {
      const std::size_t grown = std::max(bytes, std::min(2 * e->bytes, limit));
      void* fresh = allocate<device_space>(grown, stream);
      deallocate<device_space>(e->data, stream);  // after every earlier use: they were on this stream
      e->data = fresh;
      e->bytes = grown;
    }
    return lease(e, std::move(lock), stream);
  }

  // How many bytes the workspace of (device, stream) holds (0: none yet), for tests.
  std::size_t bytes_of(int device, cudaStream_t stream) {
    entry* e = nullptr;
    {
      std::lock_guard map_lock(mutex_);
      const auto at = entries_.find({device, stream});
      if (at == entries_.end()) return 0;
      e = at->second.get();
    }
    std::lock_guard lock(e->mutex);
    return e->bytes;
  }

 private:
  // The entry of (device, stream), made on first use. Each thread remembers the
  // last one it looked up, so that a thread issuing matmuls on one stream skips
  // the map and its lock (entries live as long as their owner: the one owner,
  // matmul_workspaces(), lives until exit).
  entry* entry_for(int device, cudaStream_t stream) {
    thread_local struct {
      const stream_workspaces* owner = nullptr;
      int device = -1;
      cudaStream_t stream = nullptr;
      entry* found = nullptr;
    } last;
    if (last.owner == this && last.device == device && last.stream == stream) return last.found;
    entry* e = nullptr;
    {
      std::lock_guard map_lock(mutex_);
      std::unique_ptr<entry>& slot = entries_[{device, stream}];
      if (!slot) slot = std::make_unique<entry>();
      e = slot.get();
    }
    last = {this, device, stream, e};
    return e;
  }

  std::mutex mutex_;  // guards the map; each entry has its own lock
  std::map<std::pair<int, cudaStream_t>, std::unique_ptr<entry>> entries_;
};

inline stream_workspaces& matmul_workspaces() {
  static stream_workspaces workspaces;
  return workspaces;
}

}  // namespace fusor::detail
#endif  // FUSOR_HAS_CUDA
