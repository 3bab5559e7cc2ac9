// fusor/exec/cuda.hpp — the CUDA executor: a pass is one kernel launch on the
// executor's stream.
//
// Three kernel variants per pass at most: linear with 16-byte vector access
// (every pointer aligned), linear with scalar access, and strided; their
// bodies are exec/pass_kernels.hpp's, which the host tests also run under the
// SIMT emulator. The launch
// policy gives the block size and items per thread, or leaves them (0) to the
// occupancy API, asked once per kernel and device (launch_shape.hpp). Indices
// are index_t throughout: a pass may be longer than 2^31 elements. Only
// translation units compiled by nvcc see this header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include <algorithm>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/launch_shape.hpp"
#include "fusor/exec/pass.hpp"
#include "fusor/exec/pass_kernels.hpp"
#include "fusor/kernels/warp_mma.hpp"

namespace fusor {

namespace detail {
// A pass's kernel: one of pass_kernels.hpp's bodies, run by the GPU's threads.
template <class Body, class Pass>
__global__ void pass_kernel(const __grid_constant__ Pass p, int items_per_thread) {
  Body::template run<device_simt>(p, items_per_thread);
}

// The launch shape of Kernel for `work` steps: the occupancy API's suggestion
// is cached per kernel and device, so GPUs of different sizes get their own.
template <auto Kernel>
launch_shape derive_launch(const launch_policy& policy, index_t work) {
  static per_device_cache<occupancy_suggestion> suggestions;
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  const occupancy_suggestion suggested = suggestions.get(device, [] {
    occupancy_suggestion s;
    FUSOR_CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&s.min_grid, &s.block, Kernel));
    return s;
  });
  return plan_launch(policy, work, suggested);
}
}  // namespace detail

/// Runs each pass as one kernel launch on `stream`, asynchronously; needs nvcc and a GPU.
struct cuda_executor {
  cudaStream_t stream = nullptr;  ///< The stream kernels are queued on (nullptr: the default stream).
  launch_policy launch{};  ///< Block size and items per thread; zeros leave them to the occupancy API.

  /// Waits on the host until all work queued on `stream` is done; throws cuda_error.
  void synchronize() const { FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream)); }

  /// Queues pass `p` as one kernel (vectorised where `plan` allows) and returns without waiting; throws
  /// cuda_error without a GPU or when the launch fails.
  template <class Pass>
  void run(const Pass& p, pass_plan plan) const {
    static_assert(sizeof(Pass) <= kernel_parameter_limit,
                  "fusor: this expression tree is larger than a kernel parameter may be (32764 bytes); "
                  "split it into two assignments");
    gpu::require("the cuda executor");
    if (p.size == 0) return;
    detail::dispatch_pass(p, plan, [&](auto body, index_t steps) {
      start<detail::pass_kernel<decltype(body), Pass>>(p, steps);
    });
  }

  /// Whether every operand of `Target` is device-accessible.
  template <class Target>
  static constexpr bool can_run = target_readable_from_device_v<Target>;
  static constexpr const char* name = "cuda";  ///< The executor's name.

 private:
  template <auto Kernel, class Pass>
  void start(const Pass& p, index_t work) const {
    const detail::launch_shape shape = detail::derive_launch<Kernel>(launch, std::max<index_t>(work, 1));
    Kernel<<<shape.grid, shape.block, 0, stream>>>(p, shape.items);
    FUSOR_CUDA_CHECK(cudaGetLastError());
    gpu::launch_counter().fetch_add(1);
  }
};

}  // namespace fusor
#endif  // FUSOR_HAS_CUDA
