// fusor/kernels/attention_flash_delta.hpp — delta = rowsum(dY * Y) per query
// and head, the backward's first step (as FlashAttention-2's preprocessing),
// for 16-bit dY and Y in 16-byte aligned rows: written against the Simt
// policy (warp_mma.hpp) so that the host tests run it too.
//
// Each thread takes 8 columns of one row as two 16-byte loads (dY, Y) and
// the row's threads, a power of two up to 16 (head_dim / 8 rounded up), add
// their sums by shuffles in a fixed order: deterministic. The kernel it
// replaces for these operands (attention_cuda.hpp, still used for others)
// gave a warp to each row and read one element a lane, about 100 bytes in
// flight a warp, with four 64-bit divisions a row.
#pragma once

#include <algorithm>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/vector_access.hpp"
#include "fusor/kernels/attention_flash.hpp"
#include "fusor/kernels/attention_operands.hpp"

namespace fusor::detail {

inline constexpr int flash_delta_threads = 128;

// Threads a row takes: head_dim / 8 columns of 8, rounded up to a power of two.
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int flash_delta_threads_per_row(index_t head_dim) {
  const index_t chunks = (head_dim + 7) / 8;
  int threads = 1;
  while (threads < chunks) threads *= 2;
  return threads;
}
// Rows of one block at a time: blocks are (batch x heads, flash_delta_grid_y).
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int flash_delta_rows_per_block(index_t head_dim) {
  return flash_delta_threads / flash_delta_threads_per_row(head_dim);
}

// Whether flash_delta_block takes these operands: 16-bit dY and Y, heads of
// a multiple of 8 columns up to 128, both in 16-byte aligned rows.
template <class DQKV, class DY, class QKV, class Y, class L>
bool flash_delta_takes(const attention_backward<DQKV, DY, QKV, Y, L>& w) {
  return sizeof(DY) == 2 && sizeof(Y) == 2 && flash_heads_take(w.shape) && flash_rows_take(w.dy) &&
         flash_rows_take(w.y);
}

// The grid's y: blocks of rows, at most a CUDA grid's 65535 (time past
// 524,280 at heads over 64); the blocks stride over the rest.
inline index_t flash_delta_grid_y(index_t time, index_t head_dim) {
  const index_t rows = flash_delta_rows_per_block(head_dim);
  return std::min<index_t>((time + rows - 1) / rows, 65535);
}

// delta[(b H + h) T + t] for rows t of block_y's blocks of rows (block_y,
// block_y + grid_y, ...) of head block_x % H of sample block_x / H;
// flash_delta_threads threads.
template <class Simt, class DQKV, class DY, class QKV, class Y, class L>
FUSOR_DEVICE void flash_delta_block(const attention_backward<DQKV, DY, QKV, Y, L>& w, float* delta) {
  const attention_geometry& g = w.shape;
  const int per_row = flash_delta_threads_per_row(g.head_dim), thread = Simt::thread();
  const int chunk = thread % per_row, rows = flash_delta_rows_per_block(g.head_dim);
  const index_t bh = Simt::block_x(), b = bh / g.heads, h = bh % g.heads;
  // The same trip count for every thread of the block: the shuffles below see every lane.
  for (index_t first = Simt::block_y() * rows; first < g.time; first += Simt::grid_y() * rows) {
    const index_t t = first + thread / per_row;
    const bool row_inside = t < g.time;
    float sum = 0.0f;
    if (row_inside && 8 * chunk < g.head_dim) {
      const index_t column = g.query_column(h) + 8 * chunk;
      const auto dy = load_lanes<8, true>(w.dy.row(b, t) + column);
      const auto y = load_lanes<8, true>(w.y.row(b, t) + column);
      FUSOR_UNROLL
      for (int j = 0; j < 8; ++j) sum += convert<float>(dy[j]) * convert<float>(y[j]);
    }
    // Every lane of the warp takes part; groups of per_row lanes (a power of
    // two, at most 16) sum among themselves.
    for (int mask = per_row / 2; mask > 0; mask /= 2) sum += Simt::shfl_xor(sum, mask);
    if (row_inside && chunk == 0) delta[bh * g.time + t] = sum;
  }
}

#if FUSOR_HAS_CUDA
template <class DQKV, class DY, class QKV, class Y, class L>
__global__ void __launch_bounds__(flash_delta_threads)
    attention_flash_delta_kernel(const attention_backward<DQKV, DY, QKV, Y, L> w, float* delta) {
  flash_delta_block<device_simt>(w, delta);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
