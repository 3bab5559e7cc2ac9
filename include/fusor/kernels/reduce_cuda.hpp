// fusor/kernels/reduce_cuda.hpp — reductions under the CUDA executor, on the
// executor's stream, reading any expression in place (never materialised),
// with CUB's block- and warp-wide reductions inside fusor's kernels.
//
// Whole tensor, one or two kernels: blocks of 256 threads each reduce a
// contiguous range of memory positions (the value at position i is a linear
// load when every leaf is laid out alike, 16 bytes at a time when every
// pointer is 16-byte aligned, else the expression at the multi-index of i)
// with cub::BlockReduce; a second single-block kernel
// combines the block results in block order and finishes (mean, norm,
// argmax's index) into the destination or a value for the host.
//
// Along an axis, in a fixed tree order as well:
// - the axis innermost in memory and at least 32 long: a warp per output reads
//   the axis contiguously (16 bytes a lane where the input is linear and
//   aligned and the row starts on a 16-byte boundary) and combines with
//   cub::WarpReduce;
// - otherwise: a thread per output (neighbouring threads read neighbouring
//   outputs: coalesced), with up to 8 threads of a block sharing one output's
//   axis and combining through shared memory;
// - few outputs and a long axis: each output's axis is split over several
//   warps/blocks, whose partial results (from the pool) a second kernel
//   combines in split order.
// The number of blocks and splits depends on the size and the device's SM
// count only, so results are bit-for-bit repeatable on one device. (CUB's
// DeviceReduce is not used: every call instantiates several kernels per tuning
// policy in the user's translation unit, a fourfold compile time: bench/RESULTS.md.)
// Only translation units compiled by nvcc see this header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include <algorithm>

#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/reduce_ops.hpp"

namespace fusor::detail {

inline constexpr int reduction_block_threads = 256;

template <auto Kernel, class Job>
void launch_reduce(const Job& job, dim3 grid, dim3 block, cudaStream_t stream) {
  static_assert(sizeof(Job) <= kernel_parameter_limit,
                "fusor: this expression tree is larger than a kernel parameter may be (32764 bytes); "
                "split the reduction");
  Kernel<<<grid, block, 0, stream>>>(job);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}

// Elements per vector load of a linear, 16-byte aligned input: 16 bytes of its
// narrowest operand (argmax and argmin read one at a time).
template <class Red, class In>
inline constexpr int reduction_lanes = Red::indexed ? 1 : int(16 / In::expression_type::narrowest_element);

// ---- whole tensor -----------------------------------------------------------------
// Where a whole-tensor result goes: the one element of a destination view...
template <class Dst>
struct view_sink {
  Dst dst;
  template <class T>
  FUSOR_DEVICE void operator()(const T& value) const {
    store_output(dst, ::cuda::std::array<index_t, 1>{}, -1, value);
  }
};
// ... or a device scratch value the host copies back.
template <class T>
struct value_sink {
  T* out;
  template <class V>
  FUSOR_DEVICE void operator()(const V& value) const { *out = convert<T>(value); }
};

template <class Red, class In, class Sink>
struct whole_job {
  using accumulator_type = typename Red::accumulator;
  static constexpr int lanes = reduction_lanes<Red, In>;
  Red red;
  In in;
  Sink sink;
  index_t chunk;              // positions per block, a multiple of the block size
  index_t blocks;             // blocks of the first kernel
  accumulator_type* partial;  // one per block of the first kernel, when there are several
  bool vectorized = false;    // linear, every pointer 16-byte aligned, lanes > 1

  FUSOR_DEVICE accumulator_type value_at(index_t p) const {
    if constexpr (Red::indexed) {
      const auto idx = in.order.index_of(p);
      return red.lift(in.at(idx), in.logical_index(idx));
    } else {
      if (in.linear) return red.lift(in.at_position(p), p);
      return red.lift(in.at(in.order.index_of(p)), p);
    }
  }

  // A block's positions [begin, end) `lanes` at a time (16-byte loads: begin is
  // a multiple of the block size, so of lanes), the last (end - begin) % lanes
  // one by one; added to `acc`.
  FUSOR_DEVICE accumulator_type add_vectors(index_t begin, index_t end, accumulator_type acc) const {
    if constexpr (lanes > 1) {
      constexpr index_t step = index_t(reduction_block_threads) * lanes;
      const index_t vector_end = begin + (end - begin) / lanes * lanes;
      for (index_t p = begin + index_t(threadIdx.x) * lanes; p < vector_end; p += step) {
        const auto v = in.expression.template load<lanes, true>(p);
        FUSOR_UNROLL
        for (int j = 0; j < lanes; ++j) acc = red(acc, red.lift(v[j], p + j));
      }
      for (index_t p = vector_end + threadIdx.x; p < end; p += reduction_block_threads) acc = red(acc, value_at(p));
    }
    return acc;
  }
};

// Block b: positions [b * chunk, (b + 1) * chunk), thread t every 256th from b * chunk + t.
template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) reduce_whole_kernel(const __grid_constant__ Job job) {
  using accumulator = typename Job::accumulator_type;
  using block_reduce = cub::BlockReduce<accumulator, reduction_block_threads>;
  __shared__ typename block_reduce::TempStorage temp;
  const index_t begin = index_t(blockIdx.x) * job.chunk;
  const index_t end = ::cuda::std::min(job.in.size, begin + job.chunk);
  accumulator acc = job.red.identity();
  if (job.vectorized)
    acc = job.add_vectors(begin, end, acc);
  else
    for (index_t p = begin + threadIdx.x; p < end; p += reduction_block_threads) acc = job.red(acc, job.value_at(p));
  acc = block_reduce(temp).Reduce(acc, job.red);
  if (threadIdx.x == 0) {
    if (job.blocks == 1) job.sink(job.red.finish(acc, job.in.size));
    else job.partial[blockIdx.x] = acc;
  }
}

// One block: the first kernel's block results, in block order.
template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) finish_whole_kernel(const __grid_constant__ Job job) {
  using accumulator = typename Job::accumulator_type;
  using block_reduce = cub::BlockReduce<accumulator, reduction_block_threads>;
  __shared__ typename block_reduce::TempStorage temp;
  accumulator acc = job.red.identity();
  for (index_t b = threadIdx.x; b < job.blocks; b += reduction_block_threads) acc = job.red(acc, job.partial[b]);
  acc = block_reduce(temp).Reduce(acc, job.red);
  if (threadIdx.x == 0) job.sink(job.red.finish(acc, job.in.size));
}

// Enough blocks to fill the device (8 of 256 threads per SM), each at least 4
// positions per thread.
template <class Red, class In, class Sink>
void cuda_reduce_whole(const Red& red, const In& in, const Sink& sink, cudaStream_t stream) {
  using job_type = whole_job<Red, In, Sink>;
  constexpr index_t threads = reduction_block_threads;
  const index_t most_blocks = index_t(gpu::multiprocessor_count()) * 8;
  index_t blocks = std::clamp<index_t>((in.size + threads * 4 - 1) / (threads * 4), 1, most_blocks);
  const index_t per_block = (in.size + blocks - 1) / blocks;
  const index_t chunk = std::max<index_t>(threads, (per_block + threads - 1) / threads * threads);
  blocks = std::max<index_t>(1, (in.size + chunk - 1) / chunk);
  job_type job{red, in, sink, chunk, blocks, nullptr};
  job.vectorized = job_type::lanes > 1 && in.linear && in.expression.aligned16();
  buffer<device_space> partial;
  if (blocks > 1) {
    partial = buffer<device_space>(std::size_t(blocks) * sizeof(typename Red::accumulator), stream);
    job.partial = partial.template as<typename Red::accumulator>();
  }
  launch_reduce<reduce_whole_kernel<job_type>>(job, dim3(unsigned(blocks)), dim3(threads), stream);
  if (blocks > 1) launch_reduce<finish_whole_kernel<job_type>>(job, dim3(1), dim3(threads), stream);
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
  index_t splits;  // pieces each output's axis is cut into
  index_t chunk;   // elements per piece
  typename Red::accumulator* partial;  // [outputs][splits] when splits > 1
  bool vectorized = false;  // rows: linear, aligned, the axis of unit stride, lanes > 1

  // A warp's piece [begin, end) of the axis whose element `begin` sits at
  // memory position `first` (a multiple of lanes), `lanes` at a time, the last
  // (end - begin) % lanes one by one; added to `acc`.
  FUSOR_DEVICE accumulator_type add_row_vectors(index_t first, index_t begin, index_t end, int lane,
                                                accumulator_type acc) const {
    if constexpr (lanes > 1) {
      const index_t vectors = (end - begin) / lanes;
      for (index_t v = lane; v < vectors; v += 32) {
        const auto x = in.expression.template load<lanes, true>(first + v * lanes);
        FUSOR_UNROLL
        for (int j = 0; j < lanes; ++j) acc = red(acc, red.lift(x[j], begin + v * lanes + j));
      }
      for (index_t r = begin + vectors * lanes + lane; r < end; r += 32)
        acc = red(acc, red.lift(in.at_position(first + (r - begin)), r));
    }
    return acc;
  }

  FUSOR_HOST_DEVICE void finish(const ::cuda::std::array<index_t, In::rank>& idx, index_t m, index_t split,
                                const typename Red::accumulator& acc) const {
    if (splits == 1) store_output(dst, idx, in.axis, red.finish(acc, in.length));
    else partial[m * splits + split] = acc;
  }
};

inline constexpr int warps_per_block = 8;
inline constexpr int axis_block_threads = reduction_block_threads;

// A warp per (output, piece), lanes striding along the axis; warps stride
// over the tasks when there are more than the grid's limit.
template <class Job>
__global__ void __launch_bounds__(axis_block_threads) reduce_rows_kernel(const __grid_constant__ Job job) {
  using accumulator = typename Job::accumulator_type;
  using warp_reduce = cub::WarpReduce<accumulator>;
  __shared__ typename warp_reduce::TempStorage temp[warps_per_block];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const index_t tasks = job.in.outputs * job.splits;
  // The whole warp takes the same tasks, so it stays converged for the reduction.
  for (index_t task = index_t(blockIdx.x) * warps_per_block + warp; task < tasks;
       task += index_t(gridDim.x) * warps_per_block) {
    const index_t m = task / job.splits, split = task % job.splits;
    auto idx = job.in.order.index_of(m);
    const index_t begin = split * job.chunk, end = ::cuda::std::min(job.in.length, begin + job.chunk);
    accumulator acc = job.red.identity();
    idx[job.in.axis] = begin;
    const index_t first = job.vectorized ? job.in.memory_position(idx) : 0;
    if (job.vectorized && first % Job::lanes == 0) {
      acc = job.add_row_vectors(first, begin, end, lane, acc);
    } else {
      for (index_t r = begin + lane; r < end; r += 32) {
        idx[job.in.axis] = r;
        acc = job.red(acc, job.red.lift(job.in.at(idx), r));
      }
    }
    acc = warp_reduce(temp[warp]).Reduce(acc, job.red);
    if (lane == 0) job.finish(idx, m, split, acc);
    __syncwarp();  // temp[warp] is reused by the next task
  }
}

// blockDim (outputs_per_block, threads_per_output): a thread per output and
// piece, threadIdx.y striding along the axis; grid.y: the pieces. Blocks
// stride over the groups of outputs when there are more than the grid's limit.
template <class Job>
__global__ void __launch_bounds__(axis_block_threads) reduce_columns_kernel(const __grid_constant__ Job job) {
  using accumulator = typename Job::accumulator_type;
  __shared__ accumulator shared[axis_block_threads];
  const int x = int(threadIdx.x), y = int(threadIdx.y), width = int(blockDim.x), height = int(blockDim.y);
  const index_t split = blockIdx.y, groups = (job.in.outputs + width - 1) / width;
  for (index_t g = blockIdx.x; g < groups; g += gridDim.x) {  // the same trips in the whole block
    const index_t m = g * width + x;
    const bool active = m < job.in.outputs;
    ::cuda::std::array<index_t, Job::input_type::rank> idx{};
    accumulator acc = job.red.identity();
    if (active) {
      idx = job.in.order.index_of(m);
      const index_t begin = split * job.chunk, end = ::cuda::std::min(job.in.length, begin + job.chunk);
      for (index_t r = begin + y; r < end; r += height) {
        idx[job.in.axis] = r;
        acc = job.red(acc, job.red.lift(job.in.at(idx), r));
      }
    }
    if (height > 1) {  // fixed tree over y (height is a power of two)
      shared[y * width + x] = acc;
      __syncthreads();
      for (int half = height / 2; half > 0; half /= 2) {
        if (y < half) shared[y * width + x] = job.red(shared[y * width + x], shared[(y + half) * width + x]);
        __syncthreads();
      }
      acc = shared[x];
      __syncthreads();  // shared is rewritten by the next group
    }
    if (y == 0 && active) job.finish(idx, m, split, acc);
  }
}

// A thread per output: its pieces in split order.
template <class Job>
__global__ void finish_pieces_kernel(const __grid_constant__ Job job) {
  for (index_t m = index_t(blockIdx.x) * blockDim.x + threadIdx.x; m < job.in.outputs;
       m += index_t(gridDim.x) * blockDim.x) {
    typename Job::accumulator_type acc = job.red.identity();
    for (index_t s = 0; s < job.splits; ++s) acc = job.red(acc, job.partial[m * job.splits + s]);
    store_output(job.dst, job.in.order.index_of(m), job.in.axis, job.red.finish(acc, job.in.length));
  }
}

// Blocks along x for `units` of work, within the grid's limit (the kernels stride over the rest).
inline unsigned grid_x_for(index_t units) { return unsigned(std::clamp<index_t>(units, 1, max_grid_blocks)); }

// Pieces per output: enough parallel work for the GPU (`target` warps or
// blocks), at least `min_piece` elements per piece, at most `max_splits` pieces.
inline index_t choose_splits(index_t units, index_t target, index_t length, index_t min_piece, index_t max_splits) {
  if (units >= target || length <= min_piece) return 1;
  const index_t want = (target + units - 1) / units, most = (length + min_piece - 1) / min_piece;
  return std::max<index_t>(1, std::min({want, most, max_splits}));
}

template <class Red, class In, class Dst>
void cuda_reduce_axis(const Red& red, const In& in, const Dst& dst, cudaStream_t stream) {
  using job_type = axis_job<Red, In, Dst>;
  const index_t outputs = in.outputs, length = in.length;
  if (outputs == 0) return;
  const index_t sms = gpu::multiprocessor_count();
  job_type job{red, in, dst, 1, std::max<index_t>(length, 1), nullptr};
  const bool rows = in.axis_innermost && length >= 32;
  dim3 grid, block;
  if (rows) {
    job.splits = choose_splits(outputs, sms * 64, length, 32 * 16, index_t(1) << 20);
    block = dim3(axis_block_threads);
    job.vectorized = job_type::lanes > 1 && in.linear && in.memory_stride[in.axis] == 1 && in.expression.aligned16();
  } else {
    const int height = length >= 64 ? 8 : 1, width = axis_block_threads / height;
    const index_t blocks_x = (outputs + width - 1) / width;
    job.splits = choose_splits(blocks_x, sms * 8, length, index_t(height) * 16, 65535);
    block = dim3(width, height);
    grid.x = grid_x_for(blocks_x);
  }
  job.chunk = (length + job.splits - 1) / job.splits;
  if (length > 0) job.splits = (length + job.chunk - 1) / job.chunk;  // no empty pieces
  if (rows) grid = dim3(grid_x_for((outputs * job.splits + warps_per_block - 1) / warps_per_block));
  else grid.y = unsigned(job.splits);

  buffer<device_space> pieces;
  if (job.splits > 1) {
    pieces = buffer<device_space>(std::size_t(outputs * job.splits) * sizeof(typename Red::accumulator), stream);
    job.partial = pieces.template as<typename Red::accumulator>();
  }
  if (rows) launch_reduce<reduce_rows_kernel<job_type>>(job, grid, block, stream);
  else launch_reduce<reduce_columns_kernel<job_type>>(job, grid, block, stream);
  if (job.splits > 1)
    launch_reduce<finish_pieces_kernel<job_type>>(job, dim3(grid_x_for((outputs + 255) / 256)), dim3(256), stream);
}

}  // namespace fusor::detail
#endif  // FUSOR_HAS_CUDA
