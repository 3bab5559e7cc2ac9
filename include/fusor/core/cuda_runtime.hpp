// fusor/core/cuda_runtime.hpp — checked CUDA runtime calls, GPU detection and the
// launch counter.
//
// Every CUDA call fusor makes goes through FUSOR_CUDA_CHECK, so a failure throws
// fusor::cuda_error naming the call, file and line. fusor::gpu::available()
// answers whether a GPU can be used; in a translation unit not compiled by nvcc
// it is always false (such a unit is host only by design).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/value_cache.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace fusor::gpu {

#if FUSOR_HAS_CUDA
/// The runtime also keeps the status of a failed call as its "last error", which
/// the next cudaGetLastError() returns: the check after an unrelated kernel
/// launch would then throw for this old failure. A failure reported here has
/// been reported, so its record is cleared (errors that break the context stay
/// and are reported by every later call, as they should be).
inline void forget_reported_error() noexcept { (void)cudaGetLastError(); }

/// Throws cuda_error naming `call`, `file`, `line` and the error unless `status` is cudaSuccess.
inline void check(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    forget_reported_error();
    throw cuda_error(std::string("fusor: CUDA call ") + call + " failed at " + file + ":" +
                     std::to_string(line) + ": " + cudaGetErrorName(status) + " (" +
                     cudaGetErrorString(status) + ")");
  }
}
/// Calls a CUDA runtime function and throws cuda_error naming the call, file and line when it fails.
#define FUSOR_CUDA_CHECK(call) ::fusor::gpu::check((call), #call, __FILE__, __LINE__)

/// Streaming multiprocessors of the current device: sizes grids that fill the GPU.
inline int multiprocessor_count() {
  int device = 0, count = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

/// Blocks of Kernel, each of `block_threads` threads and `dynamic_shared` bytes of
/// dynamic shared memory, that the current device holds at once (the occupancy
/// API's blocks per multiprocessor, at least 1, times the multiprocessors): a
/// grid of that many blocks fills the GPU in one wave. Cached per kernel, device
/// and launch size. A kernel that needs more than 48 KB of shared memory must be
/// allowed it (allow_dynamic_shared) before it is asked about.
template <auto Kernel>
int resident_blocks(int block_threads, std::size_t dynamic_shared) {
  static detail::keyed_cache<std::tuple<int, int, std::size_t>, int> per_multiprocessor;
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  const int blocks = per_multiprocessor.get({device, block_threads, dynamic_shared}, [&] {
    int fitting = 0;
    FUSOR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fitting, Kernel, block_threads, dynamic_shared));
    return std::max(fitting, 1);
  });
  return multiprocessor_count() * blocks;
}

/// Bytes of shared memory `kernel` declares statically.
template <class Kernel>
std::size_t static_shared_bytes(Kernel* kernel) {
  cudaFuncAttributes attributes{};
  FUSOR_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.sharedSizeBytes;
}
/// Lets `kernel` launch with `dynamic_bytes` of dynamic shared memory beside its
/// `static_bytes`: past 48 KB in all a kernel must ask for its dynamic part.
/// The limit is the kernel's, for every host thread: it is only ever raised
/// (per kernel and device), since a thread lowering it to its own smaller
/// bytes could fail another thread's launch that had raised it just before.
inline void allow_dynamic_shared_bytes(const void* kernel, std::size_t dynamic_bytes, std::size_t static_bytes) {
  if (dynamic_bytes + static_bytes <= 48 * 1024) return;
  static detail::keyed_cache<std::pair<int, const void*>, std::size_t> allowed;
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  // Under the cache's lock: two threads' raises cannot cross, so the limit never goes down.
  allowed.update({device, kernel}, [&](std::size_t& most) {
    if (dynamic_bytes <= most) return;
    FUSOR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_bytes)));
    most = dynamic_bytes;
  });
}
/// allow_dynamic_shared_bytes for a kernel of any signature.
template <class Kernel>
void allow_dynamic_shared(Kernel* kernel, std::size_t dynamic_bytes, std::size_t static_bytes) {
  allow_dynamic_shared_bytes(reinterpret_cast<const void*>(kernel), dynamic_bytes, static_bytes);
}

/// Whether `kernel`'s code for the current device was compiled for compute
/// capability `version` (80, 90, ...) or newer: its machine code and the PTX it
/// came from, so code JIT-compiled from older PTX (where the newer instructions
/// were compiled out) answers no. Not cached: callers keep the answer per device.
template <class Kernel>
bool code_version_at_least(Kernel* kernel, int version) {
  cudaFuncAttributes attributes{};
  FUSOR_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return attributes.binaryVersion >= version && attributes.ptxVersion >= version;
}

/// Whether a CUDA GPU can be used (asked once); always false in a unit not compiled by nvcc.
inline bool available() {
  static const bool has_device = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      forget_reported_error();  // "no device" is answered by returning false
      return false;
    }
    return count > 0;
  }();
  return has_device;
}
#else
inline bool available() { return false; }
#endif

/// Throws a clear error where a GPU is needed and there is none.
inline void require(const char* what) {
  if (!available())
    throw cuda_error(std::string("fusor: ") + what +
                     " needs a CUDA GPU, and none is available" +
                     (FUSOR_HAS_CUDA ? "" : " (this translation unit was not compiled by nvcc)"));
}

/// Kernel launches made by fusor since the program started: lets tests check
/// that one assignment is one launch.
inline std::atomic<std::uint64_t>& launch_counter() {
  static std::atomic<std::uint64_t> counter{0};
  return counter;
}
/// The current value of launch_counter().
inline std::uint64_t launch_count() { return launch_counter().load(); }

/// Of those, launches in thread-block clusters (the row-wise kernels' long
/// rows on sm_90): lets tests check that the cluster path ran, not its fallback.
inline std::atomic<std::uint64_t>& cluster_launch_counter() {
  static std::atomic<std::uint64_t> counter{0};
  return counter;
}
/// Of those, launches of the row-wise kernels that stage each group's next
/// row in shared memory (16-bit rows; kernels/row_reduce.hpp, staged_row).
inline std::atomic<std::uint64_t>& staged_launch_counter() {
  static std::atomic<std::uint64_t> counter{0};
  return counter;
}

}  // namespace fusor::gpu
