// fusor/optim/gradient_norm.hpp — adds the sum of squares of one gradient
// buffer (fp32, bf16 or fp16) to a device-resident fp64 total, for clipping by
// global norm and for the overflow check of the loss scaler.
//
// Why not fusor::sum_of_squares into a rank-0 destination: that overwrites
// (the global norm spans several buffers) and may allocate scratch per call
// (a step must not allocate). Here the scratch (one partial sum per block and
// an arrival counter) belongs to a workspace made once, and the sum finishes
// in the same launch: the last block to arrive adds the block sums in block
// order, so the result is bit-for-bit repeatable, and resets the counter for
// the next call (or the next replay of a captured graph).
//
// Squares accumulate in fp64: no finite fp32 gradient can overflow the total,
// so the total is finite exactly when every gradient is (Inf and NaN carry).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/view.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/reduce.hpp"

#if FUSOR_HAS_CUDA
#include <cub/block/block_reduce.cuh>
#endif

namespace fusor::optim {

/// Scratch for the device sum: made once (construction), reused every step.
template <class Space>
class gradient_norm_workspace {
 public:
  /// For a device space, allocates 8 partial sums per multiprocessor and a zeroed arrival counter on
  /// `stream`; for a host-only space, nothing.
  explicit gradient_norm_workspace([[maybe_unused]] stream_t stream = {}) {
#if FUSOR_HAS_CUDA
    if constexpr (Space::device_accessible) {
      capacity_ = gpu::multiprocessor_count() * 8;
      memory_ = buffer<Space>(std::size_t(capacity_) * sizeof(double) + sizeof(unsigned int), stream);
      FUSOR_CUDA_CHECK(cudaMemsetAsync(arrivals(), 0, sizeof(unsigned int), stream));
    }
#endif
  }
  /// One partial sum per block, capacity() of them.
  double* partial() const { return memory_.template as<double>(); }
  /// How many blocks of the sum under way have stored their partial sum (0 between sums).
  unsigned int* arrivals() const { return reinterpret_cast<unsigned int*>(partial() + capacity_); }
  /// The most blocks one sum launches (0 for a host-only space).
  int capacity() const { return capacity_; }

 private:
  buffer<Space> memory_;
  int capacity_ = 0;
};

#if FUSOR_HAS_CUDA
namespace detail {
inline constexpr int norm_block_threads = 256;

template <int V, class T>
__global__ void __launch_bounds__(norm_block_threads)
    add_sum_of_squares_kernel(const T* __restrict__ g, index_t n, double* total, double* partial,
                              unsigned int* arrivals) {
  using block_reduce = cub::BlockReduce<double, norm_block_threads>;
  __shared__ typename block_reduce::TempStorage temp;
  __shared__ bool last_block;
  const index_t stride = index_t(gridDim.x) * norm_block_threads;
  const index_t first = index_t(blockIdx.x) * norm_block_threads + threadIdx.x;
  const index_t vectors = n / V;
  double acc = 0.0;
  for (index_t s = first; s < vectors; s += stride) {
    const lanes<T, V> x = load_lanes<V, V != 1>(g + s * V);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const double d = convert<double>(x[j]);
      acc += d * d;
    }
  }
  for (index_t i = vectors * V + first; i < n; i += stride) {
    const double d = convert<double>(g[i]);
    acc += d * d;
  }
  acc = block_reduce(temp).Sum(acc);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = acc;
    __threadfence();  // the sum is visible before the arrival is counted
    last_block = atomicAdd(arrivals, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last_block) return;
  double sum = 0.0;
  for (unsigned int b = threadIdx.x; b < gridDim.x; b += norm_block_threads) sum += __ldcg(partial + b);
  sum = block_reduce(temp).Sum(sum);  // temp is free again: every thread passed the barrier above
  if (threadIdx.x == 0) {
    *total += sum;
    *arrivals = 0;
  }
}
}  // namespace detail
#endif

/// total += sum of g[i]^2, on the executor's stream (host: now).
template <class P, class Space>
void add_sum_of_squares(double* total, const view<P, dextents<index_t, 1>, row_major, Space>& g,
                        const gradient_norm_workspace<Space>&, const host_executor& executor) {
  static_assert(Space::host_accessible, "fusor: the host executor cannot read device gradients");
  if (g.size() == 0) return;
  *total += fusor::sum_of_squares(cast<double>(g), executor);
}

#if FUSOR_HAS_CUDA
/// total += sum of g[i]^2, queued on the executor's stream as one launch that uses `workspace`; the result
/// is bit-for-bit repeatable.
template <class P, class Space>
void add_sum_of_squares(double* total, const view<P, dextents<index_t, 1>, row_major, Space>& g,
                        const gradient_norm_workspace<Space>& workspace, const cuda_executor& executor) {
  static_assert(Space::device_accessible, "fusor: the cuda executor cannot read host gradients");
  using T = storage_t<P>;
  gpu::require("the cuda executor");
  const index_t n = g.size();
  if (n == 0) return;
  constexpr int V = int(16 / sizeof(T));
  const bool aligned = reinterpret_cast<std::uintptr_t>(g.data()) % 16 == 0;
  const index_t work = aligned ? n / V : n;
  const index_t per_block = index_t(detail::norm_block_threads) * 4;  // at least 4 steps per thread
  const int blocks = int(std::clamp<index_t>((work + per_block - 1) / per_block, 1, workspace.capacity()));
  if (aligned)
    detail::add_sum_of_squares_kernel<V, T><<<blocks, detail::norm_block_threads, 0, executor.stream>>>(
        g.data(), n, total, workspace.partial(), workspace.arrivals());
  else
    detail::add_sum_of_squares_kernel<1, T><<<blocks, detail::norm_block_threads, 0, executor.stream>>>(
        g.data(), n, total, workspace.partial(), workspace.arrivals());
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
#endif

}  // namespace fusor::optim
