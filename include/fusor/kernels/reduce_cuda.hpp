// fusor/kernels/reduce_cuda.hpp — reductions under the CUDA executor, on the
// executor's stream, reading any expression in place (never materialised).
// The kernels' bodies and launch arithmetic are reduce_kernels.hpp's (written
// against the Simt policy, so the host tests run them under the SIMT
// emulator); here they are wrapped in __global__ kernels and launched. (CUB's
// DeviceReduce is not used: every call instantiates several kernels per
// tuning policy in the user's translation unit, a fourfold compile time:
// bench/RESULTS.md.) Only translation units compiled by nvcc see this
// header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/reduce_kernels.hpp"
#include "fusor/kernels/warp_mma.hpp"

namespace fusor::detail {

template <auto Kernel, class Job>
void launch_reduce(const Job& job, index_t grid_x, index_t grid_y, int block, cudaStream_t stream) {
  static_assert(sizeof(Job) <= kernel_parameter_limit,
                "fusor: this expression tree is larger than a kernel parameter may be (32764 bytes); "
                "split the reduction");
  Kernel<<<dim3(unsigned(grid_x), unsigned(grid_y)), block, 0, stream>>>(job);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}

template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) reduce_whole_kernel(const __grid_constant__ Job job) {
  reduce_whole_part<device_simt>(job);
}
template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) finish_whole_kernel(const __grid_constant__ Job job) {
  finish_whole<device_simt>(job);
}
template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) reduce_rows_kernel(const __grid_constant__ Job job) {
  reduce_rows<device_simt>(job);
}
template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) reduce_columns_kernel(const __grid_constant__ Job job) {
  reduce_columns<device_simt>(job);
}
template <class Job>
__global__ void __launch_bounds__(reduction_block_threads) finish_pieces_kernel(const __grid_constant__ Job job) {
  finish_pieces<device_simt>(job);
}

template <class Red, class In, class Sink>
void cuda_reduce_whole(const Red& red, const In& in, const Sink& sink, cudaStream_t stream) {
  using job_type = whole_job<Red, In, Sink>;
  const int resident = gpu::resident_blocks<reduce_whole_kernel<job_type>>(reduction_block_threads, 0);
  job_type job = plan_reduce_whole(red, in, sink, resident);
  buffer<device_space> partial;
  if (job.blocks > 1) {
    partial = buffer<device_space>(std::size_t(job.blocks) * sizeof(typename Red::accumulator), stream);
    job.partial = partial.template as<typename Red::accumulator>();
  }
  launch_reduce<reduce_whole_kernel<job_type>>(job, job.blocks, 1, reduction_block_threads, stream);
  if (job.blocks > 1) launch_reduce<finish_whole_kernel<job_type>>(job, 1, 1, reduction_block_threads, stream);
}

template <class Red, class In, class Dst>
void cuda_reduce_axis(const Red& red, const In& in, const Dst& dst, cudaStream_t stream) {
  using job_type = axis_job<Red, In, Dst>;
  if (in.outputs == 0) return;
  job_type job = plan_reduce_axis(red, in, dst, gpu::multiprocessor_count());
  buffer<device_space> pieces;
  if (job.splits > 1) {
    pieces = buffer<device_space>(std::size_t(in.outputs * job.splits) * sizeof(typename Red::accumulator), stream);
    job.partial = pieces.template as<typename Red::accumulator>();
  }
  if (job.rows) launch_reduce<reduce_rows_kernel<job_type>>(job, job.grid_x, 1, reduction_block_threads, stream);
  else launch_reduce<reduce_columns_kernel<job_type>>(job, job.grid_x, job.grid_y, reduction_block_threads, stream);
  if (job.splits > 1)
    launch_reduce<finish_pieces_kernel<job_type>>(job, job.finish_blocks, 1, reduction_block_threads, stream);
}

// The CUDA executor's side of reduce.hpp's dispatch: a whole tensor into
// `sink`, an axis into `dst`, and a whole tensor's value copied to the host
// (which waits for the stream).
template <class Red, class In, class Sink>
void reduce_whole_on(const Red& red, const In& in, const Sink& sink, const cuda_executor& executor) {
  gpu::require("the cuda executor");
  cuda_reduce_whole(red, in, sink, executor.stream);
}
template <class Red, class In, class Dst>
void reduce_axis_on(const Red& red, const In& in, const Dst& dst, const cuda_executor& executor) {
  gpu::require("the cuda executor");
  cuda_reduce_axis(red, in, dst, executor.stream);
}
template <class Red, class In>
typename Red::result_type reduce_value_on(const Red& red, const In& in, const cuda_executor& executor) {
  using result = typename Red::result_type;
  gpu::require("the cuda executor");
  buffer<device_space> scratch(sizeof(result), executor.stream);
  cuda_reduce_whole(red, in, value_sink<result>{scratch.as<result>()}, executor.stream);
  result value{};
  FUSOR_CUDA_CHECK(cudaMemcpyAsync(&value, scratch.data(), sizeof(result), cudaMemcpyDeviceToHost, executor.stream));
  FUSOR_CUDA_CHECK(cudaStreamSynchronize(executor.stream));
  return value;
}

}  // namespace fusor::detail
#endif  // FUSOR_HAS_CUDA
