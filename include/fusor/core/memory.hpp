// fusor/core/memory.hpp — memory spaces (host, pinned host, device) and how each
// allocates.
//
// Device memory comes from the device's stream-ordered pool (cudaMallocAsync),
// never managed memory; the pool keeps freed blocks (release threshold raised)
// so a training step that frees and reallocates does not reach the driver.
// Every failure throws allocation_error naming the bytes and the space.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"

namespace fusor {

#if FUSOR_HAS_CUDA
/// A CUDA stream; `void*` in host-only units, which never touch a stream.
using stream_t = cudaStream_t;
#else
using stream_t = void*;  // host-only units never touch a stream
#endif

/// Host allocations are aligned for 16-byte vector access and cache lines.
inline constexpr std::size_t host_alignment = 64;

/// Ordinary host memory, aligned to host_alignment bytes.
struct host_space {
  static constexpr const char* name = "host";  ///< The space's name in error messages.
  static constexpr bool host_accessible = true;  ///< Host code may read and write it.
  static constexpr bool device_accessible = false;  ///< Kernels may not touch it.
};
/// Page-locked host memory: fast, asynchronous copies; readable by kernels too.
struct pinned_space {
  static constexpr const char* name = "pinned host";  ///< The space's name in error messages.
  static constexpr bool host_accessible = true;  ///< Host code may read and write it.
  static constexpr bool device_accessible = true;  ///< Kernels may read and write it.
};
/// GPU memory from the current device's stream-ordered pool; needs nvcc.
struct device_space {
  static constexpr const char* name = "device";  ///< The space's name in error messages.
  static constexpr bool host_accessible = false;  ///< Host code may not dereference it.
  static constexpr bool device_accessible = true;  ///< Kernels may read and write it.
};

/// A memory space tag: its name, and whether host code and kernels can access its memory.
template <class S>
concept memory_space = requires {
  { S::name } -> std::convertible_to<const char*>;
  S::host_accessible;
  S::device_accessible;
};

namespace detail {
template <class>
inline constexpr bool needs_nvcc = false;

#if FUSOR_HAS_CUDA
// The current device's default pool, set to keep what is freed.
inline cudaMemPool_t device_pool() {
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool{};
  FUSOR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  static thread_local int configured_for = -1;
  if (configured_for != device) {
    std::uint64_t keep_everything = UINT64_MAX;
    FUSOR_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    configured_for = device;
  }
  return pool;
}

// The current device's memory in bytes (read once per device). A request for
// more is refused before it reaches the pool, whose failure for a request
// beyond any device's size may otherwise surface late.
inline std::size_t device_memory_bytes() {
  static std::atomic<std::size_t> total[64]{};
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<std::size_t>& slot = total[device % 64];
  std::size_t bytes = slot.load(std::memory_order_relaxed);
  if (bytes == 0) {
    std::size_t free_bytes = 0;
    FUSOR_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &bytes));
    slot.store(bytes, std::memory_order_relaxed);
  }
  return bytes;
}
#endif
}  // namespace detail

/// Every allocate() that takes memory, in any space: how tests show that a
/// training step allocates nothing once it has run once.
inline std::atomic<std::uint64_t>& allocation_counter() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
/// The current value of allocation_counter().
inline std::uint64_t allocation_count() { return allocation_counter().load(std::memory_order_relaxed); }

/// Allocates `bytes` bytes in `Space` (nullptr for 0), ordered on `stream` for device memory. Throws
/// allocation_error when memory cannot be had, cuda_error for pinned or device memory without a GPU.
template <memory_space Space>
void* allocate(std::size_t bytes, [[maybe_unused]] stream_t stream = {}) {
  if (bytes == 0) return nullptr;
  allocation_counter().fetch_add(1, std::memory_order_relaxed);
  if constexpr (std::is_same_v<Space, host_space>) {
    const std::size_t rounded = (bytes + host_alignment - 1) / host_alignment * host_alignment;
    void* p = std::aligned_alloc(host_alignment, rounded);
    if (!p) throw allocation_error(bytes, Space::name, "out of host memory");
    return p;
  } else {
#if FUSOR_HAS_CUDA
    gpu::require(std::is_same_v<Space, device_space> ? "device memory" : "pinned host memory");
    void* p = nullptr;
    cudaError_t status;
    if constexpr (std::is_same_v<Space, pinned_space>)
      status = cudaMallocHost(&p, bytes);
    else if (const std::size_t total = detail::device_memory_bytes(); bytes > total)
      throw allocation_error(bytes, Space::name, "the device has " + std::to_string(total) + " bytes in all");
    else
      status = cudaMallocFromPoolAsync(&p, bytes, detail::device_pool(), stream);
    if (status != cudaSuccess) {
      gpu::forget_reported_error();
      throw allocation_error(bytes, Space::name, cudaGetErrorString(status));
    }
    return p;
#else
    static_assert(detail::needs_nvcc<Space>,
                  "fusor: pinned and device memory need a translation unit compiled by nvcc");
    return nullptr;
#endif
  }
}

/// Frees memory from allocate<Space>() (nullptr: nothing), ordered on `stream` for device memory; never throws.
template <memory_space Space>
void deallocate(void* p, [[maybe_unused]] stream_t stream = {}) noexcept {
  if (!p) return;
  if constexpr (std::is_same_v<Space, host_space>) {
    std::free(p);
  } else {
#if FUSOR_HAS_CUDA
    // Errors here cannot be thrown from a destructor; a failed free of a valid
    // pointer means the context is already broken and the next checked call says
    // so. Its record is cleared so that it is not blamed on the next launch.
    cudaError_t status;
    if constexpr (std::is_same_v<Space, pinned_space>)
      status = cudaFreeHost(p);
    else
      status = cudaFreeAsync(p, stream);
    if (status != cudaSuccess) gpu::forget_reported_error();
#endif
  }
}

}  // namespace fusor
