// fusor/kernels/row_reduce.hpp — the CUDA building blocks of the row-wise
// kernels: a row handled by one warp (short rows) or one block (long rows),
// reductions over that group with CUB (cub::WarpReduce, cub::BlockReduce) whose
// result every thread of the group receives, a row cached in registers, and
// reads and writes of V consecutive columns that are 16-byte vector accesses
// where the row allows.
//
// Thread `lane` of a group owns columns (k * Threads + lane) * V + [0, V) for
// k = 0, 1, ...; a row of at most Threads * cached_row_elements elements is
// read once into registers and written from there (one pass over memory),
// longer rows are read twice (statistics, then outputs). Column ownership is
// the same in both cases, which the parameter-gradient accumulators of the
// normalisation backward passes rely on. Reductions use a fixed tree for a
// given group size, so results are deterministic run to run.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <cub/block/block_reduce.cuh>
#include <cub/util_ptx.cuh>
#include <cub/util_type.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda/std/cmath>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/vector_access.hpp"
#include "fusor/kernels/rows.hpp"

namespace fusor::detail {

// Launch shapes of every row-wise kernel: warps of a 256-thread block take one
// row each, or a block of 128 to 1024 threads takes one row: the smallest
// group whose registers hold the row (with_row_group); longer rows go to
// 512-thread blocks that read them twice. Each thread caches 32 elements of
// its row in registers (a warp: rows up to 1024 elements, blocks: 4096 to
// 32768), counted as 4 bytes wide: every element becomes an fp32 value when
// used, and more elements would cost occupancy. A pass caching two rows (y
// and dy, x and dy) keeps 16 elements of each (a warp: 512, blocks: 2048 to
// 16384). Kernels are capped at 64 registers a thread (32 resident warps a
// multiprocessor).
// Small groups keep many rows in flight on a multiprocessor: one 512-thread
// block per 4096-element row kept 16 KB in flight per block, two blocks a
// multiprocessor, and read a quarter of the copy bandwidth (bf16, H200).
inline constexpr int warp_rows_block_threads = 256;
inline constexpr int block_row_threads = 512;
// Bytes of loads a thread issues before using them when a row is read in a
// loop, so that several 16-byte loads are in flight per thread (8 registers;
// more spill under the 64-register cap).
inline constexpr int looped_batch_bytes = 32;
inline constexpr int cached_row_bytes = 128;
inline constexpr int max_row_blocks = 1 << 16;

// Bytes a cached column counts for: each cached row's element, at least 4.
template <class... Cached>
inline constexpr int cached_bytes = ((sizeof(Cached) > 4 ? int(sizeof(Cached)) : 4) + ...);
// Items of V columns a thread caches, each column counting `ElementBytes`.
template <int V, int ElementBytes>
inline constexpr int cached_items = cached_row_bytes / (V * ElementBytes) > 0 ? cached_row_bytes / (V * ElementBytes) : 1;

template <int Threads>
struct row_group {
  static_assert(Threads == 32 || Threads == 128 || Threads == 256 || Threads == 512 || Threads == 1024,
                "fusor: a row is handled by a warp or a block of 128, 256, 512 or 1024 threads");
  static constexpr int threads = Threads;
  static constexpr bool is_warp = Threads == 32;
  static constexpr int block_threads = is_warp ? warp_rows_block_threads : Threads;
  static constexpr int per_block = block_threads / Threads;
  // Resident blocks asked of the compiler: 64 registers a thread at most, so
  // 32 warps fit on a multiprocessor.
  static constexpr int min_blocks = 1024 / block_threads;
  // The longest row a group keeps in registers, at V columns per step.
  template <int V, int ElementBytes>
  static constexpr int capacity = Threads * V * cached_items<V, ElementBytes>;

  __device__ static int lane() { return int(threadIdx.x) % Threads; }
  __device__ static int index() { return int(threadIdx.x) / Threads; }
  __device__ static index_t first_row() { return index_t(blockIdx.x) * per_block + index(); }
  __device__ static index_t row_step() { return index_t(gridDim.x) * per_block; }
  // Column of item k of this thread, V columns per item.
  template <int V>
  __device__ static int column(int k) { return (k * Threads + lane()) * V; }

  // The reduction of `value` over the group, in every thread of the group.
  // Every thread of the group must call it (block groups: the whole block).
  template <class T, class Op>
  __device__ static T all_reduce(const T& value, Op op) {
    if constexpr (is_warp) {
      using warp_reduce = cub::WarpReduce<T>;
      __shared__ typename warp_reduce::TempStorage temp[per_block];
      const T result = warp_reduce(temp[index()]).Reduce(value, op);
      __syncwarp();
      return cub::ShuffleIndex<32>(result, 0, 0xffffffffu);
    } else {
      using block_reduce = cub::BlockReduce<T, Threads>;
      __shared__ typename block_reduce::TempStorage temp;
      __shared__ cub::Uninitialized<T> shared_result;
      const T result = block_reduce(temp).Reduce(value, op);
      if (threadIdx.x == 0) shared_result.Alias() = result;
      __syncthreads();
      const T out = shared_result.Alias();
      __syncthreads();  // temp and shared_result may be reused by the next reduction
      return out;
    }
  }
};

// ---- reductions ----------------------------------------------------------------------
struct sum_op {
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T operator()(const T& a, const T& b) const { return a + b; }
};
// fmax: a NaN is passed over here; the kernels let it reach a sum instead.
struct max_op {
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T operator()(const T& a, const T& b) const { return ::cuda::std::fmax(a, b); }
};

// exp(x) in a row kernel. Fast: for results stored in 16 bits only, the
// multi-function unit's ex2.approx.ftz of x log2(e): two instructions where
// the accurate expf takes ten, which bound bf16 softmax rows by arithmetic.
// Its relative error, about 2^-22 plus |x| 2^-24 (x <= 0 here, a shift by
// the row's max), stays far below a bf16 or fp16 store's rounding (2^-9,
// 2^-12); results under 2^-126 become 0 (also beneath what 16 bits keep
// apart from 0 in the sums). Results stored in fp32 or fp64 keep the accurate exp.
template <bool Fast, class S>
__device__ FUSOR_FORCE_INLINE S row_exp(S x) {
  if constexpr (Fast && std::is_same_v<S, float>) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
  } else {
    return ::cuda::std::exp(x);
  }
}

// Whether every type is 16 bits wide (bf16, fp16): results a fast exp serves.
template <class... T>
inline constexpr bool all_16_bit = ((sizeof(T) == 2) && ...);

// Running max and sum of exp(x - max): softmax statistics in one read of a row.
// A NaN element makes the sum NaN; an all -inf row gives sum NaN (exp(-inf - -inf)),
// as the two-pass formula does.
// FastExp: row_exp's fast form (results stored in 16 bits).
template <class S, bool FastExp = false>
struct max_and_sum {
  S max;
  S sum;
  __device__ FUSOR_FORCE_INLINE static S rescale(S from, S to) {
    return from == to ? S(1) : row_exp<FastExp>(from - to);  // == also covers -inf -> -inf
  }
  template <int V, class T>
  __device__ FUSOR_FORCE_INLINE void add(const lanes<T, V>& v, int valid) {
    S m = max;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) m = ::cuda::std::fmax(m, convert<S>(v[j]));
    S s = sum * rescale(max, m);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) s += row_exp<FastExp>(convert<S>(v[j]) - m);
    max = m;
    sum = s;
  }
};
struct combine_max_and_sum {
  template <class S, bool FastExp>
  __device__ FUSOR_FORCE_INLINE max_and_sum<S, FastExp> operator()(const max_and_sum<S, FastExp>& a,
                                                                   const max_and_sum<S, FastExp>& b) const {
    using stats = max_and_sum<S, FastExp>;
    const S m = ::cuda::std::fmax(a.max, b.max);
    return {m, a.sum * stats::rescale(a.max, m) + b.sum * stats::rescale(b.max, m)};
  }
};

// Welford's running mean and sum of squared deviations, for rows read twice.
template <class S>
struct mean_and_m2 {
  S count;
  S mean;
  S m2;
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void add(S x) {
    count += S(1);
    const S delta = x - mean;
    mean += delta / count;
    m2 += delta * (x - mean);
  }
};
// Chan et al.'s combination of two Welford states.
struct combine_mean_and_m2 {
  template <class S>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE mean_and_m2<S> operator()(const mean_and_m2<S>& a,
                                                                 const mean_and_m2<S>& b) const {
    if (a.count == S(0)) return b;
    if (b.count == S(0)) return a;
    const S n = a.count + b.count;
    const S delta = b.mean - a.mean;
    return {n, a.mean + delta * (b.count / n), a.m2 + b.m2 + delta * delta * (a.count * b.count / n)};
  }
};

// ---- columns ---------------------------------------------------------------------------
// Columns within a row are int: rows are shorter than 2^31 (checked on the host).
// How many of the V columns from c are inside a row of `length`.
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int valid_columns(int c, int length, int V) {
  const int left = length - c;
  return left <= 0 ? 0 : (left >= V ? V : left);
}

// Columns [c, c + V) of a row; columns past the end read as zero. Contiguous:
// the row has unit stride and a 16-byte-aligned start, and V columns inside it
// move as 16-byte vectors. Otherwise one element access per column.
template <bool Contiguous, int V, class T>
__device__ FUSOR_FORCE_INLINE lanes<std::remove_const_t<T>, V> load_columns(T* row, int c, int length,
                                                                            index_t stride) {
  using E = std::remove_const_t<T>;
  if constexpr (Contiguous) {
    if (c + V <= length) return load_lanes<V, true>(row + c);
  }
  lanes<E, V> out;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j)
    out[j] = c + j < length ? row[Contiguous ? index_t(c + j) : index_t(c + j) * stride] : convert<E>(0.0f);
  return out;
}

// Columns [c, c + V) of an expression's row (expression_rows::reader).
template <bool Contiguous, int V, class Reader>
__device__ FUSOR_FORCE_INLINE lanes<row_value_t<Reader>, V> load_columns(const Reader& row, int c, int length,
                                                                          index_t) {
  using E = row_value_t<Reader>;
  lanes<E, V> out;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) out[j] = c + j < length ? row[c + j] : E(0);
  return out;
}

template <bool Contiguous, int V, class T, class Value>
__device__ FUSOR_FORCE_INLINE void store_columns(T* row, int c, int length, index_t stride,
                                                 const lanes<Value, V>& values) {
  lanes<T, V> raw;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) raw[j] = convert<T>(values[j]);
  if constexpr (Contiguous) {
    if (c + V <= length) {
      store_lanes<V, true>(row + c, raw);
      return;
    }
  }
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j)
    if (c + j < length) row[Contiguous ? index_t(c + j) : index_t(c + j) * stride] = raw[j];
}

// Calls use(c, load(c)) for each item of V columns this thread owns in a row
// of n, loading up to looped_batch_bytes of items before using them: a row
// read in a loop would otherwise keep one load in flight per thread. Loads
// past the end read zeros and are not used. Each thread uses only the columns
// it loaded, so an output may be its input (in place).
template <class Group, int V, class Load, class Use>
__device__ FUSOR_FORCE_INLINE void for_each_item_batched(int n, const Load& load, const Use& use) {
  constexpr int step = Group::threads * V;
  using item = decltype(load(0));
  constexpr int batch = sizeof(item) >= looped_batch_bytes ? 1 : int(looped_batch_bytes / sizeof(item));
  // c < max_row_length + batch * step: no int overflow (rows.hpp).
  for (int c0 = Group::template column<V>(0); c0 < n; c0 += batch * step) {
    item items[batch];
    FUSOR_UNROLL
    for (int u = 0; u < batch; ++u) items[u] = load(c0 + u * step);
    FUSOR_UNROLL
    for (int u = 0; u < batch; ++u)
      if (c0 + u * step < n) use(c0 + u * step, items[u]);
  }
}

// ---- launches ---------------------------------------------------------------------------
// launch(Group{}) with the row group for rows of `length` whose items are V
// columns, each counting ElementBytes of a thread's cache: a warp or the
// smallest block whose registers hold the row, else a 512-thread block (more
// rows in flight than 1024) that reads it in a loop.
template <int V, int ElementBytes, class Launch>
void with_row_group(index_t length, const Launch& launch) {
  if (length <= row_group<32>::template capacity<V, ElementBytes>)
    launch(row_group<32>{});
  else if (length <= row_group<128>::template capacity<V, ElementBytes>)
    launch(row_group<128>{});
  else if (length <= row_group<256>::template capacity<V, ElementBytes>)
    launch(row_group<256>{});
  else if (length <= row_group<512>::template capacity<V, ElementBytes>)
    launch(row_group<512>{});
  else if (length <= row_group<1024>::template capacity<V, ElementBytes>)
    launch(row_group<1024>{});
  else
    launch(row_group<block_row_threads>{});
}

template <class Group>
int row_blocks(index_t rows) {
  const index_t blocks = (rows + Group::per_block - 1) / Group::per_block;
  return int(std::clamp<index_t>(blocks, 1, max_row_blocks));
}

// One launch of Kernel, checked and counted.
template <auto Kernel, class... Args>
void launch_kernel(dim3 grid, int block, std::size_t shared_bytes, cudaStream_t stream, const Args&... args) {
  Kernel<<<grid, block, shared_bytes, stream>>>(args...);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}

}  // namespace fusor::detail

#endif  // FUSOR_HAS_CUDA
