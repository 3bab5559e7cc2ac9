// fusor/kernels/row_launch.hpp — how the CUDA row-wise kernels are shaped,
// as plain arithmetic that the host tests check (tests/kernels/test_row_launch.cpp):
// which group of threads handles a row of a given length, how long a row a
// group keeps in registers, the grid over the rows, and where layernorm
// backward's accumulators keep each column. The groups themselves
// (warp_rows, block_rows) and the launches are in row_reduce.hpp.
#pragma once

#include <algorithm>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"

namespace fusor::detail {

// Launch shapes of every row-wise kernel: warps of a 256-thread block take one
// row each, or a block of 64 to 1024 threads takes one row: the smallest
// group whose registers hold the row (row_launch_for). On sm_90 a row too long
// for one block is held by a cluster of two to sixteen 512-thread blocks
// (block_rows spans the cluster; reductions go through distributed shared
// memory) and still read once; longer rows, and GPUs or binaries without
// clusters (or without clusters past the portable eight blocks), go to
// 512-thread blocks that read them twice. Each thread caches 32 elements of
// its row in registers (a warp: rows up to 1024 elements, blocks: 2048 to
// 32768, clusters: up to 262144), counted as 4 bytes wide:
// every element becomes an fp32 value when used, and more elements would cost
// occupancy (bf16 rows kept as read, 64 elements a thread, spilled in every
// bf16 kernel: 44 to 151 spill stores in the SASS, 2026-11-27). A pass
// caching two rows (y and dy, x and dy) keeps 16 elements of each (a warp:
// 512, blocks: 1024 to 16384, clusters: up to 131072). Kernels are capped at 64 registers a thread
// (32 resident warps a multiprocessor).
// Small groups keep many rows in flight on a multiprocessor: one 512-thread
// block per 4096-element row kept 16 KB in flight per block, two blocks a
// multiprocessor, and read a quarter of the copy bandwidth (bf16, H200).
inline constexpr int warp_rows_block_threads = 256;
inline constexpr int block_row_threads = 512;
// Clusters of up to 8 blocks run on every sm_90 GPU (the portable size);
// H100 and H200 run up to 16 where the kernel allows non-portable sizes
// (resident_clusters asks; where the GPU refuses, the rows are read twice).
inline constexpr int portable_cluster_blocks = 8;
inline constexpr int max_cluster_blocks = 16;
inline constexpr int cached_row_bytes = 128;
inline constexpr int max_row_blocks = 1 << 16;

// Bytes a cached column counts for: each cached row's element, at least 4.
template <class... Cached>
inline constexpr int cached_bytes = ((sizeof(Cached) > 4 ? int(sizeof(Cached)) : 4) + ...);
// Items of V columns a thread caches, each column counting `ElementBytes`.
template <int V, int ElementBytes>
inline constexpr int cached_items = cached_row_bytes / (V * ElementBytes) > 0 ? cached_row_bytes / (V * ElementBytes) : 1;
// The longest row a group of `threads` keeps in registers, at V columns per item.
template <int V, int ElementBytes>
FUSOR_HOST_DEVICE constexpr index_t group_capacity(int threads) {
  return index_t(threads) * V * cached_items<V, ElementBytes>;
}

// How a row kernel is launched: `rows_per_block` rows a block (warps, eight
// a 256-thread block), or one row a block of `block_threads`, or one row a
// cluster of `cluster_blocks` blocks.
struct row_launch {
  int block_threads;
  int cluster_blocks;
  int rows_per_block;
  // Threads of one row's group.
  constexpr int group_threads() const {
    return rows_per_block > 1 ? block_threads / rows_per_block : block_threads * cluster_blocks;
  }
  // Threads of one row's group in one block (a cluster's blocks each hold block_threads).
  constexpr int local_threads() const { return rows_per_block > 1 ? block_threads / rows_per_block : block_threads; }
};

// A warp a row, eight rows a 256-thread block; a 512-thread block a row
// (rows it does not hold are read twice).
inline constexpr row_launch warp_row_launch{warp_rows_block_threads, 1, warp_rows_block_threads / 32};
inline constexpr row_launch block_row_launch{block_row_threads, 1, 1};

// The launch for rows of `length` whose items are V columns, each counting
// ElementBytes of a thread's cache: a warp, the smallest block of 64 to 1024
// threads whose registers hold the row, the smallest cluster of 512-thread
// blocks that does (launch_rows falls back to one block where clusters cannot
// run), else a 512-thread block (more rows in flight than 1024) that reads
// the row twice.
template <int V, int ElementBytes>
constexpr row_launch row_launch_for(index_t length) {
  if (length <= group_capacity<V, ElementBytes>(32)) return warp_row_launch;
  for (int threads = 64; threads <= 1024; threads *= 2)
    if (length <= group_capacity<V, ElementBytes>(threads)) return {threads, 1, 1};
  const index_t per_block = group_capacity<V, ElementBytes>(block_row_threads);
  const index_t blocks = (length + per_block - 1) / per_block;
  return {block_row_threads, blocks <= max_cluster_blocks ? int(blocks) : 1, 1};
}

// Blocks of a launch over `rows`: whole groups, a multiple of the cluster
// size, at most max_row_blocks (the kernels stride over the rest).
constexpr int row_grid(const row_launch& shape, index_t rows) {
  const index_t groups = (rows + shape.rows_per_block - 1) / shape.rows_per_block;
  return int(std::clamp<index_t>(groups, 1, max_row_blocks / shape.cluster_blocks) * shape.cluster_blocks);
}

// ---- layernorm backward's accumulators ----------------------------------------------------
// A group's accumulator row holds dweight's terms in slots [0, padded) and
// dbias's in [padded, 2 padded). A cluster's row is split among its blocks:
// each keeps the slots of the columns its own threads own, in its own shared
// memory (a 50304-column row's 2 x 50304 floats do not fit one block's; its
// seventh does). `threads` is the group's, `local` its threads in one block
// (a warp's 32, a block's, a cluster's block's: powers of two from 32 to
// 1024), and padded = a thread's items (n over threads * V, rounded up)
// x local x V: n rounded up to threads * V where the group is one block.
// Slots are item-major: thread `local_lane`'s item k (column
// (k threads + lane) V) lane j is slot (k V + j) local + local_lane, so the
// threads of a warp add into consecutive words (by column, 16-bit rows had
// 8-way shared-memory bank conflicts), and each thread's slots are those
// congruent to its local lane.
template <int V>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t accumulator_padded(index_t n, int threads, int local) {
  const index_t step = index_t(threads) * V;
  return (n + step - 1) / step * local * V;
}
// The length of one group's accumulator row in one block: dweight's padded
// slots, and dbias's after them where the norm is centered (layernorm;
// rmsnorm has no bias).
template <int V, bool Centered>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t accumulator_row_width(index_t n, int threads, int local) {
  return (Centered ? 2 : 1) * accumulator_padded<V>(n, threads, local);
}
// The slot of lane j of this thread's item k.
template <int V>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int accumulator_slot(int k, int j, int local, int local_lane) {
  return (k * V + j) * local + local_lane;
}
// log2 of a power of two, by a count of trailing zeros.
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int log2_of_power_of_two(int x) {
#if defined(__CUDA_ARCH__)
  return __ffs(x) - 1;
#else
  return __builtin_ctz(unsigned(x));
#endif
}
// The column of slot s in [0, padded) of the block whose first thread is
// the group's lane `first_lane` (0 but in a cluster): accumulators fit shared
// memory, so slots are int; divisions by the run-time block size are shifts.
template <int V>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int accumulator_column(int s, int threads, int local, int first_lane) {
  const int shift = log2_of_power_of_two(local);
  const int k = (s >> shift) / V, rest = s - k * local * V;
  return (k * threads + first_lane + (rest & (local - 1))) * V + (rest >> shift);
}

}  // namespace fusor::detail
