// fusor/kernels/simt_reduce.hpp — reductions over a warp and over a block,
// written against a Simt policy (warp_mma.hpp): on the GPU with device_simt,
// on the host under the SIMT emulator (simt_emulator.hpp), so the kernels
// built on them (row_reduce.hpp's groups, reduce_kernels.hpp) run in the host
// tests. The trees are fixed for a given block size: results are
// deterministic run to run.
#pragma once

#include "fusor/config.hpp"

namespace fusor::detail {

// The reduction of `value` over the warp by a butterfly of shuffles: every
// lane holds a reduction of all 32 values, lane 0's in a fixed order.
template <class Simt, class T, class Op>
FUSOR_DEVICE FUSOR_FORCE_INLINE T warp_butterfly(T value, Op op) {
  FUSOR_UNROLL
  for (int mask = 16; mask > 0; mask /= 2) value = op(value, Simt::shfl_xor(value, mask));
  return value;
}
// The reduction of `value` over the warp, in every lane: lane 0's butterfly
// result. op(a, b) and op(b, a) need not be the same bits (Welford's
// combination is not; nvcc may contract a product on one side into an fma;
// fmax of +0 and -0), and a row's threads must agree on its statistics.
template <class Simt, class T, class Op>
FUSOR_DEVICE FUSOR_FORCE_INLINE T warp_all_reduce(T value, Op op) {
  return Simt::shfl(warp_butterfly<Simt>(value, op), 0);
}

// The reduction of `value` over the block, in every thread of it; every
// thread of the block must call it, and its size must be a power of two
// from 64 to 1024 threads. Each warp reduces; then every warp reduces the
// warps' results alike, lane i taking warp i % warps's (no exchange needed
// across warps), and hands on lane 0's. The warps' results pass through a
// static shared array of this <T, Tag>; the barrier at the end lets the
// next call write it again.
template <class Simt, class Tag, class T, class Op>
FUSOR_DEVICE FUSOR_FORCE_INLINE T block_all_reduce(const T& value, Op op) {
  T* const warp_results = Simt::template shared_array<T, 32, Tag>();
  const int thread = Simt::thread(), warp = thread / 32, warps = Simt::block_threads() / 32;
  const T mine = warp_butterfly<Simt>(value, op);
  if (thread % 32 == 0) Simt::store_shared(&warp_results[warp], mine);
  Simt::sync_block();
  T out = Simt::load_shared(&warp_results[thread % 32 & (warps - 1)]);
  // The butterfly over `warps` lanes (2 to 32), unrolled for each size.
  FUSOR_UNROLL
  for (int mask = 16; mask > 0; mask /= 2)
    if (mask < warps) out = op(out, Simt::shfl_xor(out, mask));
  out = Simt::shfl(out, 0);  // every warp holds the same lane 0 result
  Simt::sync_block();        // every warp has read warp_results
  return out;
}

}  // namespace fusor::detail
