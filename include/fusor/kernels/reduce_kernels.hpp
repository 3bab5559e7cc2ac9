// fusor/kernels/reduce_kernels.hpp — the CUDA reductions' kernel bodies and
// their launch arithmetic, written against a Simt policy (warp_mma.hpp) so
// that the host tests run them under the SIMT emulator
// (tests/kernels/reduce_kernels_emulated.hpp); reduce_cuda.hpp launches them
// on the GPU.
//
// Whole tensor, one or two kernels: blocks of 256 threads each reduce a
// contiguous range of memory positions (the value at position i is a linear
// load when every leaf is laid out alike, 16 bytes at a time when every
// pointer is 16-byte aligned, else the expression at the multi-index of i),
// then across the block (simt_reduce.hpp); a second single-block kernel
// combines the block results in a fixed tree over them and finishes (mean, norm,
// argmax's index) into the destination or a value for the host. There are at
// most as many blocks as the GPU holds at once (no second, partial wave).
//
// Along an axis, in a fixed tree order as well:
// - the axis innermost in memory and at least 32 long: a warp per output reads
//   the axis contiguously (16 bytes a lane where the input is linear and
//   aligned and the row starts on a 16-byte boundary) and combines by a
//   butterfly of shuffles;
// - otherwise: a thread per output (neighbouring threads read neighbouring
//   outputs: coalesced), with up to 8 threads of a block sharing one output's
//   axis and combining through shared memory;
// - few outputs and a long axis: each output's axis is split over several
//   warps/blocks, whose partial results a second kernel combines in split
//   order.
// Reads are issued reduction_batch at a time before any is added, so that
// several loads (16 bytes each where vectorized) are in flight per thread
// (one at a time left the whole sum at 0.32x of CUB's DeviceReduce on an
// H200, column sums at 0.28x of the copy bandwidth). Where every leaf is
// laid out alike (linear), an axis is walked by memory position, without a
// multi-index for each element. The number of
// blocks and splits depends on the size, the device's SM count and how many
// blocks it holds, so results are bit-for-bit repeatable on one device.
#pragma once

#include <algorithm>

#include <cuda/std/array>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/exec/launch_shape.hpp"
#include "fusor/kernels/reduce_ops.hpp"
#include "fusor/kernels/simt_reduce.hpp"

namespace fusor::detail {

inline constexpr int reduction_block_threads = 256;
inline constexpr int reduction_batch = 4;  // vector loads a thread issues before adding them
inline constexpr int warps_per_block = reduction_block_threads / 32;

// Elements per vector load of a linear, 16-byte aligned input: 16 bytes of its
// narrowest operand (argmax and argmin read one at a time).
template <class Red, class In>
inline constexpr int reduction_lanes = Red::indexed ? 1 : int(16 / In::expression_type::narrowest_element);

// `count` vectors of `Lanes` elements starting at memory positions first,
// first + step, ...: loaded reduction_batch at a time, then each element
// lifted (with its index: first element's index `index`, advancing like the
// positions) and added to `acc` in position order.
template <int Lanes, class Red, class Expression, class Acc>
FUSOR_DEVICE FUSOR_FORCE_INLINE Acc add_strided_vectors(const Red& red, const Expression& e, index_t first,
                                                        index_t index, index_t step, index_t count, Acc acc) {
  using vector = decltype(e.template load<Lanes, true>(first));
  index_t v = 0;
  for (; v + reduction_batch <= count; v += reduction_batch) {
    vector x[reduction_batch];
    FUSOR_UNROLL
    for (int u = 0; u < reduction_batch; ++u) x[u] = e.template load<Lanes, true>(first + (v + u) * step);
    FUSOR_UNROLL
    for (int u = 0; u < reduction_batch; ++u)
      FUSOR_UNROLL
      for (int j = 0; j < Lanes; ++j) acc = red(acc, red.lift(x[u][j], index + (v + u) * step + j));
  }
  for (; v < count; ++v) {
    const vector x = e.template load<Lanes, true>(first + v * step);
    FUSOR_UNROLL
    for (int j = 0; j < Lanes; ++j) acc = red(acc, red.lift(x[j], index + v * step + j));
  }
  return acc;
}

// Elements r = from, from + step, ... (< end) of an axis, read by at(r)
// reduction_batch at a time before any is added, lifted with index r and
// added to `acc` in order.
template <class Red, class At, class Acc>
FUSOR_DEVICE FUSOR_FORCE_INLINE Acc add_strided_elements(const Red& red, const At& at, index_t from, index_t end,
                                                         index_t step, Acc acc) {
  using value = decltype(at(from));
  index_t r = from;
  for (; r + (reduction_batch - 1) * step < end; r += reduction_batch * step) {
    value x[reduction_batch];
    FUSOR_UNROLL
    for (int u = 0; u < reduction_batch; ++u) x[u] = at(r + u * step);
    FUSOR_UNROLL
    for (int u = 0; u < reduction_batch; ++u) acc = red(acc, red.lift(x[u], r + u * step));
  }
  for (; r < end; r += step) acc = red(acc, red.lift(at(r), r));
  return acc;
}

// ---- whole tensor -----------------------------------------------------------------
// Where a whole-tensor result goes: the one element of a destination view...
template <class Dst>
struct view_sink {
  Dst dst;
  template <class T>
  FUSOR_HOST_DEVICE void operator()(const T& value) const {
    store_output(dst, ::cuda::std::array<index_t, 1>{}, -1, value);
  }
};
// ... or a scratch value the host copies back.
template <class T>
struct value_sink {
  T* out;
  template <class V>
  FUSOR_HOST_DEVICE void operator()(const V& value) const { *out = convert<T>(value); }
};

template <class Red, class In, class Sink>
struct whole_job {
  using red_type = Red;
  using accumulator_type = typename Red::accumulator;
  static constexpr int lanes = reduction_lanes<Red, In>;
  Red red;
  In in;
  Sink sink;
  index_t chunk = 0;                    // positions per block, a multiple of the block size
  index_t blocks = 0;                   // blocks of the first kernel
  accumulator_type* partial = nullptr;  // one per block of the first kernel, when there are several
  bool vectorized = false;              // linear, every pointer 16-byte aligned, lanes > 1

  // argmax, argmin: the element at position p, lifted with its logical (row-major) index.
  FUSOR_HOST_DEVICE accumulator_type indexed_value_at(index_t p) const {
    const auto idx = in.order.index_of(p);
    return red.lift(in.at(idx), in.logical_index(idx));
  }
};

// The whole job for `resident` blocks at most (those the GPU holds at once):
// each thread at least 4 positions, a block's chunk a multiple of its size.
template <class Red, class In, class Sink>
whole_job<Red, In, Sink> plan_reduce_whole(const Red& red, const In& in, const Sink& sink, index_t resident) {
  constexpr index_t threads = reduction_block_threads;
  whole_job<Red, In, Sink> job{red, in, sink};
  index_t blocks = std::clamp<index_t>((in.size + threads * 4 - 1) / (threads * 4), 1, std::max<index_t>(resident, 1));
  const index_t per_block = (in.size + blocks - 1) / blocks;
  job.chunk = std::max<index_t>(threads, (per_block + threads - 1) / threads * threads);
  job.blocks = std::max<index_t>(1, (in.size + job.chunk - 1) / job.chunk);
  if constexpr (whole_job<Red, In, Sink>::lanes > 1) job.vectorized = in.linear && in.expression.aligned16();
  return job;
}

// The first kernel's body. Block b: positions [b chunk, (b + 1) chunk),
// thread t every 256th from b chunk + t (every 256th vector when vectorized:
// a chunk, a multiple of 256, starts on a whole vector).
template <class Simt, class Job>
FUSOR_DEVICE FUSOR_FORCE_INLINE void reduce_whole_part(const Job& job) {
  using accumulator = typename Job::accumulator_type;
  constexpr int lanes = Job::lanes;
  const index_t begin = Simt::block_x() * job.chunk;
  const index_t end = begin + job.chunk < job.in.size ? begin + job.chunk : job.in.size;
  const index_t thread = Simt::thread();
  accumulator acc = job.red.identity();
  index_t scalar_begin = begin;  // positions before it were read as vectors
  if constexpr (lanes > 1) {
    if (job.vectorized) {
      constexpr index_t step = index_t(reduction_block_threads) * lanes;
      const index_t vectors = (end - begin) / lanes, first = begin + thread * lanes;
      const index_t mine = vectors > thread ? (vectors - thread + reduction_block_threads - 1) / reduction_block_threads
                                            : 0;
      acc = add_strided_vectors<lanes>(job.red, job.in.expression, first, first, step, mine, acc);
      scalar_begin = begin + vectors * lanes;
    }
  }
  // The rest one element at a time, reduction_batch reads in flight (but for
  // argmax and argmin, whose index is the logical one, not the position).
  const index_t from = scalar_begin + thread;
  if constexpr (Job::red_type::indexed) {
    for (index_t p = from; p < end; p += reduction_block_threads) acc = job.red(acc, job.indexed_value_at(p));
  } else if (job.in.linear) {
    const auto at = [&](index_t p) { return job.in.at_position(p); };
    acc = add_strided_elements(job.red, at, from, end, reduction_block_threads, acc);
  } else {
    const auto at = [&](index_t p) { return job.in.at(job.in.order.index_of(p)); };
    acc = add_strided_elements(job.red, at, from, end, reduction_block_threads, acc);
  }
  acc = block_all_reduce<Simt, Job>(acc, job.red);
  if (thread == 0) {
    if (job.blocks == 1) job.sink(job.red.finish(acc, job.in.size));
    else job.partial[Simt::block_x()] = acc;
  }
}

// The second kernel's body, one block: the first kernel's block results, in a fixed tree.
template <class Simt, class Job>
FUSOR_DEVICE FUSOR_FORCE_INLINE void finish_whole(const Job& job) {
  typename Job::accumulator_type acc = job.red.identity();
  for (index_t b = Simt::thread(); b < job.blocks; b += reduction_block_threads) acc = job.red(acc, job.partial[b]);
  acc = block_all_reduce<Simt, Job>(acc, job.red);
  if (Simt::thread() == 0) job.sink(job.red.finish(acc, job.in.size));
}

// ---- along an axis ----------------------------------------------------------------
template <class Red, class In, class Dst>
struct axis_job {
  using accumulator_type = typename Red::accumulator;
  using input_type = In;
  static constexpr int lanes = reduction_lanes<Red, In>;
  Red red;
  In in;
  Dst dst;
  index_t splits = 1;  // pieces each output's axis is cut into
  index_t chunk = 1;   // elements per piece
  accumulator_type* partial = nullptr;  // [outputs][splits] when splits > 1
  bool rows = false;        // a warp per (output, piece); else a thread per (output, piece)
  bool vectorized = false;  // rows: linear, aligned, the axis of unit stride, lanes > 1
  int width = 0;            // columns: outputs a block (its threads width x height, x fastest)
  int height = 1;           // columns: threads sharing one output's piece (a power of two)
  index_t grid_x = 1, grid_y = 1;  // the first kernel's grid (grid_y: the pieces, columns only)
  index_t finish_blocks = 0;       // blocks of 256 threads combining the pieces, when splits > 1

  FUSOR_HOST_DEVICE void finish(const ::cuda::std::array<index_t, In::rank>& idx, index_t m, index_t split,
                                const accumulator_type& acc) const {
    if (splits == 1) store_output(dst, idx, in.axis, red.finish(acc, in.length));
    else partial[m * splits + split] = acc;
  }
};

// Pieces per output: enough parallel work for the GPU (`target` warps or
// blocks), at least `min_piece` elements per piece, at most `max_splits` pieces.
inline index_t choose_splits(index_t units, index_t target, index_t length, index_t min_piece, index_t max_splits) {
  if (units >= target || length <= min_piece) return 1;
  const index_t want = (target + units - 1) / units, most = (length + min_piece - 1) / min_piece;
  return std::max<index_t>(1, std::min({want, most, max_splits}));
}

// The axis job and its launch on a GPU of `multiprocessors` SMs, at most
// `max_blocks` blocks along x (the kernels stride over the rest; the
// emulated tests take a small limit so that their grids stride too).
template <class Red, class In, class Dst>
axis_job<Red, In, Dst> plan_reduce_axis(const Red& red, const In& in, const Dst& dst, index_t multiprocessors,
                                        index_t max_blocks = max_grid_blocks) {
  const auto grid_x_for = [&](index_t units) { return std::clamp<index_t>(units, 1, max_blocks); };
  axis_job<Red, In, Dst> job{red, in, dst};
  const index_t outputs = in.outputs, length = in.length;
  job.chunk = std::max<index_t>(length, 1);
  job.rows = in.axis_innermost && length >= 32;
  if (job.rows) {
    job.splits = choose_splits(outputs, multiprocessors * 64, length, 32 * 16, index_t(1) << 20);
    if constexpr (axis_job<Red, In, Dst>::lanes > 1)
      job.vectorized = in.linear && in.memory_stride[in.axis] == 1 && in.expression.aligned16();
  } else {
    job.height = length >= 64 ? 8 : 1;
    job.width = reduction_block_threads / job.height;
    const index_t blocks_x = (outputs + job.width - 1) / job.width;
    job.splits = choose_splits(blocks_x, multiprocessors * 8, length, index_t(job.height) * 16, 65535);
    job.grid_x = grid_x_for(blocks_x);
  }
  job.chunk = (length + job.splits - 1) / job.splits;
  if (length > 0) job.splits = (length + job.chunk - 1) / job.chunk;  // no empty pieces
  if (job.rows) job.grid_x = grid_x_for((outputs * job.splits + warps_per_block - 1) / warps_per_block);
  else job.grid_y = job.splits;
  job.finish_blocks = job.splits > 1 ? grid_x_for((outputs + 255) / 256) : 0;
  return job;
}

// The rows kernel's body: a warp per (output, piece), lanes striding along
// the axis; warps stride over the tasks when there are more than the grid's.
template <class Simt, class Job>
FUSOR_DEVICE FUSOR_FORCE_INLINE void reduce_rows(const Job& job) {
  using accumulator = typename Job::accumulator_type;
  constexpr int lanes = Job::lanes;
  const int warp = Simt::thread() / 32, lane = Simt::thread() % 32;
  const index_t tasks = job.in.outputs * job.splits;
  // The whole warp takes the same tasks, so it stays converged for the shuffles.
  for (index_t task = Simt::block_x() * warps_per_block + warp; task < tasks;
       task += Simt::grid_x() * warps_per_block) {
    const index_t m = task / job.splits, split = task % job.splits;
    auto idx = job.in.order.index_of(m);
    const index_t begin = split * job.chunk;
    const index_t end = begin + job.chunk < job.in.length ? begin + job.chunk : job.in.length;
    accumulator acc = job.red.identity();
    set_axis(idx, job.in.axis, begin);
    if (job.in.linear) {  // element r at memory position first + (r - begin) stride: no multi-index a read
      const index_t first = job.in.memory_position(idx), stride = job.in.memory_stride[job.in.axis];
      index_t rest = begin;  // elements before it were read as vectors
      if constexpr (lanes > 1) {
        if (job.vectorized && first % lanes == 0) {  // (vectorized: stride 1)
          // Vector v (lane, lane + 32, ...) holds elements begin + v lanes + [0, lanes).
          const index_t vectors = (end - begin) / lanes;
          const index_t mine = vectors > lane ? (vectors - lane + 31) / 32 : 0;
          acc = add_strided_vectors<lanes>(job.red, job.in.expression, first + index_t(lane) * lanes,
                                           begin + index_t(lane) * lanes, 32 * lanes, mine, acc);
          rest = begin + vectors * lanes;
        }
      }
      const auto at = [&](index_t r) { return job.in.at_position(first + (r - begin) * stride); };
      acc = add_strided_elements(job.red, at, rest + lane, end, 32, acc);
    } else {
      const auto at = [&](index_t r) {
        set_axis(idx, job.in.axis, r);
        return job.in.at(idx);
      };
      acc = add_strided_elements(job.red, at, begin + lane, end, 32, acc);
    }
    acc = warp_butterfly<Simt>(acc, job.red);
    if (lane == 0) job.finish(idx, m, split, acc);
  }
}

// The columns kernel's body: a block of width x height threads (x fastest)
// takes `width` outputs, a thread per output and piece, y striding along the
// axis; grid y: the pieces. Blocks stride over the groups of outputs when
// there are more than the grid's.
template <class Simt, class Job>
FUSOR_DEVICE FUSOR_FORCE_INLINE void reduce_columns(const Job& job) {
  using accumulator = typename Job::accumulator_type;
  accumulator* const shared = Simt::template shared_array<accumulator, reduction_block_threads, Job>();
  const int width = job.width, height = job.height;
  const int x = Simt::thread() % width, y = Simt::thread() / width;
  const index_t split = Simt::block_y(), groups = (job.in.outputs + width - 1) / width;
  for (index_t g = Simt::block_x(); g < groups; g += Simt::grid_x()) {  // the same trips in the whole block
    const index_t m = g * width + x;
    const bool active = m < job.in.outputs;
    ::cuda::std::array<index_t, Job::input_type::rank> idx{};
    accumulator acc = job.red.identity();
    if (active) {
      idx = job.in.order.index_of(m);
      const index_t begin = split * job.chunk;
      const index_t end = begin + job.chunk < job.in.length ? begin + job.chunk : job.in.length;
      if (job.in.linear) {  // element r at memory position first + r stride: no multi-index a read
        set_axis(idx, job.in.axis, 0);
        const index_t first = job.in.memory_position(idx), stride = job.in.memory_stride[job.in.axis];
        const auto at = [&](index_t r) { return job.in.at_position(first + r * stride); };
        acc = add_strided_elements(job.red, at, begin + y, end, height, acc);
      } else {
        const auto at = [&](index_t r) {
          set_axis(idx, job.in.axis, r);
          return job.in.at(idx);
        };
        acc = add_strided_elements(job.red, at, begin + y, end, height, acc);
      }
    }
    if (height > 1) {  // a fixed tree over y (height is a power of two)
      Simt::store_shared(shared + y * width + x, acc);
      Simt::sync_block();
      for (int half = height / 2; half > 0; half /= 2) {
        if (y < half)
          Simt::store_shared(shared + y * width + x, job.red(Simt::load_shared(shared + y * width + x),
                                                             Simt::load_shared(shared + (y + half) * width + x)));
        Simt::sync_block();
      }
      acc = Simt::load_shared(shared + x);
      Simt::sync_block();  // shared is written again by the next group
    }
    if (y == 0 && active) job.finish(idx, m, split, acc);
  }
}

// The second kernel's body when the axis was split: a thread per output, its
// pieces in split order.
template <class Simt, class Job>
FUSOR_DEVICE FUSOR_FORCE_INLINE void finish_pieces(const Job& job) {
  for (index_t m = Simt::block_x() * Simt::block_threads() + Simt::thread(); m < job.in.outputs;
       m += Simt::grid_x() * Simt::block_threads()) {
    typename Job::accumulator_type acc = job.red.identity();
    for (index_t s = 0; s < job.splits; ++s) acc = job.red(acc, job.partial[m * job.splits + s]);
    store_output(job.dst, job.in.order.index_of(m), job.in.axis, job.red.finish(acc, job.in.length));
  }
}

}  // namespace fusor::detail
