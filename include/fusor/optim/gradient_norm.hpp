// fusor/optim/gradient_norm.hpp — adds the sum of squares of one gradient
// buffer (fp32, bf16 or fp16) to a device-resident fp64 total, for clipping by
// global norm and for the overflow check of the loss scaler.
//
// Why not fusor::sum_of_squares into a rank-0 destination: that overwrites
// (the global norm spans several buffers) and may allocate scratch per call
// (a step must not allocate). Here the scratch (one partial sum per block and
// an arrival counter) belongs to a workspace made once, and the sum finishes
// in the same launch: the last block to arrive adds the block sums in a fixed
// order, so the result is bit-for-bit repeatable, and resets the counter for
// the next call (or the next replay of a captured graph). The kernel's body is
// written against the Simt policy (warp_mma.hpp), so the host tests run it
// under the SIMT emulator.
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
#include "fusor/core/vector_access.hpp"
#include "fusor/core/view.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/reduce.hpp"
#include "fusor/kernels/simt_reduce.hpp"
#include "fusor/kernels/warp_mma.hpp"


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

namespace detail {
inline constexpr int norm_block_threads = 256;
inline constexpr int norm_batch = 4;  // vector loads a thread issues before adding them

// One sum of squares: g[0, n) added to *total. `partial` holds a sum per
// block, `arrivals` counts the blocks that stored theirs (0 between sums).
template <class T>
struct sum_of_squares_job {
  const T* g = nullptr;
  index_t n = 0;
  double* total = nullptr;
  double* partial = nullptr;
  unsigned int* arrivals = nullptr;
};

// Elements of T in one 16-byte vector load.
template <class T>
inline constexpr int norm_lanes = int(16 / sizeof(T));

// How a sum over g[0, n) is launched (the CUDA launch and the emulated tests
// alike): by vectors of norm_lanes<T> where g is 16-byte aligned, else one
// element at a time; in blocks enough for norm_batch loads a thread, at most
// `capacity` (the workspace's partial sums).
struct sum_of_squares_launch {
  bool vectorized;
  index_t blocks;
};
template <class T>
sum_of_squares_launch plan_sum_of_squares(const T* g, index_t n, int capacity) {
  const bool vectorized = reinterpret_cast<std::uintptr_t>(g) % 16 == 0;
  const index_t per_block = index_t(norm_block_threads) * norm_batch * (vectorized ? norm_lanes<T> : 1);
  return {vectorized, std::clamp<index_t>((n + per_block - 1) / per_block, 1, std::max(capacity, 1))};
}

template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE double squared_in_fp64(const T& x) {
  const double d = convert<double>(x);
  return d * d;
}

struct norm_block_sum_tag;
struct norm_last_block_tag;

// One block of the sum, written against a Simt policy (warp_mma.hpp): on the
// GPU in add_sum_of_squares_kernel, in the host tests under the SIMT
// emulator. A thread adds the squares of vectors first, first + stride, ...
// in that order, loading norm_batch of them before adding any; the block's
// sum goes to partial[block]. The block that arrives last adds the partial
// sums in a fixed order (a stride a thread, then a tree) and resets the
// counter, so the result does not depend on which block finishes when.
// V: elements per vector (16-byte aligned g when V > 1).
template <class Simt, int V, class T>
FUSOR_DEVICE void add_sum_of_squares_block(const sum_of_squares_job<T>& job) {
  constexpr auto plus = [](double a, double b) { return a + b; };
  const index_t stride = Simt::grid_x() * norm_block_threads;
  const index_t first = Simt::block_x() * norm_block_threads + Simt::thread();
  const index_t vectors = job.n / V;
  double acc = 0.0;
  index_t s = first;
  for (; s + (norm_batch - 1) * stride < vectors; s += norm_batch * stride) {
    lanes<T, V> x[norm_batch];
    FUSOR_UNROLL
    for (int u = 0; u < norm_batch; ++u) x[u] = load_lanes<V, V != 1>(job.g + (s + u * stride) * V);
    FUSOR_UNROLL
    for (int u = 0; u < norm_batch; ++u)
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) acc += squared_in_fp64(x[u][j]);
  }
  for (; s < vectors; s += stride) {
    const lanes<T, V> x = load_lanes<V, V != 1>(job.g + s * V);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) acc += squared_in_fp64(x[j]);
  }
  for (index_t i = vectors * V + first; i < job.n; i += stride) acc += squared_in_fp64(job.g[i]);
  acc = fusor::detail::block_all_reduce<Simt, norm_block_sum_tag>(acc, plus);

  unsigned int* const last_block = Simt::template shared_array<unsigned int, 1, norm_last_block_tag>();
  if (Simt::thread() == 0) {
    job.partial[Simt::block_x()] = acc;
    Simt::fence_device();  // the sum is visible before the arrival is counted
    const bool last = Simt::atomic_add(job.arrivals, 1u) + 1u == unsigned(Simt::grid_x());
    if (last) Simt::fence_device();  // and the other blocks' sums, counted before, are visible to this one
    Simt::store_shared(last_block, static_cast<unsigned int>(last));
  }
  Simt::sync_block();
  if (Simt::load_shared(last_block) == 0) return;
  double sum = 0.0;
  for (index_t b = Simt::thread(); b < Simt::grid_x(); b += norm_block_threads)
    sum += Simt::load_global_coherent(job.partial + b);
  sum = fusor::detail::block_all_reduce<Simt, norm_block_sum_tag>(sum, plus);
  if (Simt::thread() == 0) {
    *job.total += sum;
    *job.arrivals = 0;
  }
}

#if FUSOR_HAS_CUDA
template <int V, class T>
__global__ void __launch_bounds__(norm_block_threads) add_sum_of_squares_kernel(const sum_of_squares_job<T> job) {
  add_sum_of_squares_block<fusor::detail::device_simt, V>(job);
}
#endif
}  // namespace detail

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
  const detail::sum_of_squares_job<T> job{g.data(), n, total, workspace.partial(), workspace.arrivals()};
  const detail::sum_of_squares_launch launch = detail::plan_sum_of_squares(g.data(), n, workspace.capacity());
  const auto blocks = unsigned(launch.blocks);
  if (launch.vectorized)
    detail::add_sum_of_squares_kernel<detail::norm_lanes<T>>
        <<<blocks, detail::norm_block_threads, 0, executor.stream>>>(job);
  else
    detail::add_sum_of_squares_kernel<1><<<blocks, detail::norm_block_threads, 0, executor.stream>>>(job);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
#endif

}  // namespace fusor::optim
