// fusor/kernels/reduce_host.hpp — reductions under the host executor: OpenMP over
// blocks of elements (whole tensor) or over outputs (along an axis), reading
// any expression in place through its leaves, never materialising it.
//
// Summation order, fixed so that the result never depends on the thread count:
// elements are taken in blocks of `host_reduce_block` consecutive positions
// (memory order of the input's first full-shape leaf; along an axis, positions
// on the axis); each block is summed on its own (in `omp simd` lanes where the
// input is laid out linearly, else in order), and the block sums are added in
// order. The error of a sum of n elements then grows with about block/lanes +
// n/block roundings of the accumulate type instead of n. The CUDA executor adds
// in a different (tree) order, so the two agree within rounding, not bit for
// bit; max, min and the arg kinds agree exactly.
#pragma once

#include <algorithm>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/reduce_ops.hpp"

namespace fusor::detail {

inline constexpr index_t host_reduce_block = 4096;
inline constexpr index_t host_reduce_tile = 64;  // outputs reduced together when the axis is not innermost

template <class Accumulator>
struct extreme_value {
  using type = Accumulator;
};
template <class T>
struct extreme_value<arg_value<T>> {
  using type = T;
};
template <class Red>
using extreme_value_t = typename extreme_value<typename Red::accumulator>::type;

// max/min/argmax/argmin of linear positions [begin, end) whose memory positions
// are the indices that arg kinds report: the extreme in vectorised lanes (NaN
// tracked apart, as the lanes' max/min ignore it), then, for the arg kinds, the
// first position holding it (the block is still in cache).
template <class Red, class E>
typename Red::accumulator linear_extreme(const Red& red, const E& expression, index_t begin, index_t end) {
  using value = extreme_value_t<Red>;
  constexpr bool largest = Red::kind == reduction_kind::max || Red::kind == reduction_kind::argmax;
  const auto at = [&](index_t p) { return convert<value>(expression.template load<1, false>(p)[0]); };
  value best = largest ? lowest_value<value>() : highest_value<value>();
  int nan = 0;
  if constexpr (largest) {
#if FUSOR_HAS_OPENMP
#pragma omp simd reduction(max : best) reduction(| : nan)
#endif
    for (index_t p = begin; p < end; ++p) {
      const value x = at(p);
      nan |= is_nan(x);
      best = x > best ? x : best;
    }
  } else {
#if FUSOR_HAS_OPENMP
#pragma omp simd reduction(min : best) reduction(| : nan)
#endif
    for (index_t p = begin; p < end; ++p) {
      const value x = at(p);
      nan |= is_nan(x);
      best = x < best ? x : best;
    }
  }
  if constexpr (!Red::indexed) {
    if (nan) return ::cuda::std::numeric_limits<value>::quiet_NaN();
    return best;
  } else {
    for (index_t p = begin; p < end; ++p) {
      const value x = at(p);
      if (nan ? is_nan(x) : x == best) return {x, p};
    }
    return red.identity();
  }
}

// Positions [begin, end) of a whole-tensor input, in memory order.
template <class Red, class In>
typename Red::accumulator host_reduce_range(const Red& red, const In& input, index_t begin, index_t end) {
  using accumulator = typename Red::accumulator;
  // Local copies: the compiler then knows no store in the loops changes them,
  // and vectorises the loads as contiguous ones.
  const In in = input;
  const auto expression = in.expression;
  if constexpr (Red::additive) {
    if (in.linear) {
      accumulator acc = red.identity();
#if FUSOR_HAS_OPENMP
#pragma omp simd reduction(+ : acc)
#endif
      for (index_t p = begin; p < end; ++p) acc += red.lift(expression.template load<1, false>(p)[0], p);
      return acc;
    }
  } else {
    if (Red::indexed ? in.memory_is_logical : in.linear) return linear_extreme(red, expression, begin, end);
  }
  accumulator acc = red.identity();
  auto idx = in.order.index_of(begin);
  for (index_t p = begin; p < end; ++p) {
    acc = red(acc, red.lift(expression.at(idx), Red::indexed ? in.logical_index(idx) : p));
    in.order.advance(idx);
  }
  return acc;
}

template <class Red, class In>
typename Red::accumulator host_reduce_whole(const Red& red, const In& in, const host_executor& ex) {
  using accumulator = typename Red::accumulator;
  const index_t n = in.size;
  const index_t blocks = (n + host_reduce_block - 1) / host_reduce_block;
  if (blocks <= 1) return host_reduce_range(red, in, 0, n);
  std::vector<accumulator> partial(static_cast<std::size_t>(blocks));
  [[maybe_unused]] const int team = ex.thread_count(n);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t b = 0; b < blocks; ++b)
    partial[b] = host_reduce_range(red, in, b * host_reduce_block, std::min(n, (b + 1) * host_reduce_block));
  accumulator total = red.identity();
  for (const accumulator& p : partial) total = red(total, p);
  return total;
}

// Elements [begin, end) along the axis of the output whose other indices are idx.
template <class Red, class In, std::size_t R>
typename Red::accumulator host_reduce_along(const Red& red, const In& in, ::cuda::std::array<index_t, R> idx,
                                            index_t begin, index_t end) {
  using accumulator = typename Red::accumulator;
  const auto expression = in.expression;
  accumulator acc = red.identity();
  if constexpr (Red::additive) {
    if (in.linear) {
      idx[in.axis] = 0;
      const index_t base = in.memory_position(idx), step = in.memory_stride[in.axis];
      if (step == 1) {  // the common case, spelled so that the loads are contiguous vectors
#if FUSOR_HAS_OPENMP
#pragma omp simd reduction(+ : acc)
#endif
        for (index_t r = begin; r < end; ++r) acc += red.lift(expression.template load<1, false>(base + r)[0], r);
      } else {
#if FUSOR_HAS_OPENMP
#pragma omp simd reduction(+ : acc)
#endif
        for (index_t r = begin; r < end; ++r)
          acc += red.lift(expression.template load<1, false>(base + r * step)[0], r);
      }
      return acc;
    }
  }
  for (index_t r = begin; r < end; ++r) {
    idx[in.axis] = r;
    acc = red(acc, red.lift(expression.at(idx), r));
  }
  return acc;
}

// Up to host_reduce_tile outputs that are neighbours in memory, the axis in the
// outer loop, so each step reads a contiguous run; block by block along the
// axis as everywhere. Additive kinds on a linear input whose tile is one
// contiguous run read it as such, in lanes across the outputs.
template <class Red, class In, class Dst>
void host_reduce_tile_of_outputs(const Red& red, const In& in, const Dst& dst, index_t first, index_t count) {
  using accumulator = typename Red::accumulator;
  const auto expression = in.expression;
  const int axis = in.axis;
  const index_t length = in.length;
  ::cuda::std::array<index_t, In::rank> idx[host_reduce_tile]{};
  accumulator total[host_reduce_tile], part[host_reduce_tile];
  bool contiguous_run = Red::additive && in.linear;
  for (index_t j = 0; j < count; ++j) {
    idx[j] = in.order.index_of(first + j);
    total[j] = red.identity();
    contiguous_run = contiguous_run && in.memory_position(idx[j]) == in.memory_position(idx[0]) + j;
  }
  const index_t base = in.memory_position(idx[0]), step = in.memory_stride[axis];
  for (index_t begin = 0; begin < length; begin += host_reduce_block) {
    const index_t end = std::min(length, begin + host_reduce_block);
    for (index_t j = 0; j < count; ++j) part[j] = red.identity();
    if (contiguous_run) {
      if constexpr (Red::additive) {
        for (index_t r = begin; r < end; ++r) {
          const index_t row = base + r * step;
#if FUSOR_HAS_OPENMP
#pragma omp simd
#endif
          for (index_t j = 0; j < count; ++j) part[j] += red.lift(expression.template load<1, false>(row + j)[0], r);
        }
      }
    } else {
      for (index_t r = begin; r < end; ++r)
        for (index_t j = 0; j < count; ++j) {
          idx[j][axis] = r;
          part[j] = red(part[j], red.lift(expression.at(idx[j]), r));
        }
    }
    for (index_t j = 0; j < count; ++j) total[j] = red(total[j], part[j]);
  }
  for (index_t j = 0; j < count; ++j) store_output(dst, idx[j], axis, red.finish(total[j], length));
}

template <class Red, class In, class Dst>
void host_reduce_axis(const Red& red, const In& input, const Dst& dst, const host_executor& ex) {
  using accumulator = typename Red::accumulator;
  const In in = input;
  const index_t outputs = in.outputs, length = in.length;
  [[maybe_unused]] const int team = ex.thread_count(std::max(in.size, outputs));
  if (in.axis_innermost) {
    // One output at a time, its elements in order: contiguous reads.
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
    for (index_t m = 0; m < outputs; ++m) {
      const auto idx = in.order.index_of(m);
      accumulator total = red.identity();
      for (index_t begin = 0; begin < length; begin += host_reduce_block)
        total = red(total, host_reduce_along(red, in, idx, begin, std::min(length, begin + host_reduce_block)));
      store_output(dst, idx, in.axis, red.finish(total, length));
    }
  } else {
    const index_t tiles = (outputs + host_reduce_tile - 1) / host_reduce_tile;
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
    for (index_t t = 0; t < tiles; ++t) {
      const index_t first = t * host_reduce_tile;
      host_reduce_tile_of_outputs(red, in, dst, first, std::min(host_reduce_tile, outputs - first));
    }
  }
}

}  // namespace fusor::detail
