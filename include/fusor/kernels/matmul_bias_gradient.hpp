// fusor/kernels/matmul_bias_gradient.hpp — a matmul's bias gradient computed
// apart from the GEMM, for when cuBLASLt has no algorithm with the fused
// bias-gradient epilogue (BGRADA, BGRADB, DRELU_BGRAD, DGELU_BGRAD) for a
// shape, its types and layouts: the GEMM then runs with the epilogue minus its
// bias gradient (DEFAULT, DRELU, DGELU), and one kernel sums a strided matrix
// along one axis,
//
//     out[i] = sum over k < length of x[i * output_stride + k * summed_stride],
//
// accumulating in fp32 (fp64 for double) and storing in the gradient's type, as
// the epilogue does. x is fusor's a (bias_gradient_a), b (bias_gradient_b) or
// the product c (the backward activations' db). A long sum is cut into chunks
// over grid.y whose partial sums (in the matmul's workspace) a second kernel adds
// in chunk order; a chunk is read by a warp (summed axis contiguous) or by 8
// threads of a block column (output axis contiguous), combined in a fixed tree.
// Deterministic for the same sizes and device. No CUB: matmul users do not pay
// for its headers. The kernels' bodies are written against the Simt policy, so
// the host tests run them under the SIMT emulator.
//
// Test hook: the environment variable FUSOR_MATMUL_NO_BIAS_GRAD_EPILOGUE=1
// (read once, at the first matmul) or a scoped_separate_bias_gradient makes
// every GPU matmul with a bias gradient take this path, so that it is tested on
// GPUs whose cuBLASLt has every epilogue. The host executor ignores it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/kernels/simt_reduce.hpp"
#include "fusor/kernels/warp_mma.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include "fusor/core/cuda_runtime.hpp"
#endif

namespace fusor::detail {

// Whether GPU matmuls compute their bias gradient apart even where cuBLASLt
// could fuse it. Starts as FUSOR_MATMUL_NO_BIAS_GRAD_EPILOGUE says ("1": yes).
inline std::atomic<bool>& separate_bias_gradient_forced() {
  static std::atomic<bool> forced{[] {
    const char* value = std::getenv("FUSOR_MATMUL_NO_BIAS_GRAD_EPILOGUE");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }()};
  return forced;
}

// Forces (or forbids) the separate bias gradient for its lifetime (tests).
class scoped_separate_bias_gradient {
 public:
  explicit scoped_separate_bias_gradient(bool forced = true) : saved_(separate_bias_gradient_forced().exchange(forced)) {}
  scoped_separate_bias_gradient(const scoped_separate_bias_gradient&) = delete;
  scoped_separate_bias_gradient& operator=(const scoped_separate_bias_gradient&) = delete;
  ~scoped_separate_bias_gradient() { separate_bias_gradient_forced().store(saved_); }

 private:
  bool saved_;
};

// Kernel launches made by the separate bias gradient (also counted in
// gpu::launch_count()): tests of "one matmul, one launch" discount them.
inline std::atomic<std::uint64_t>& separate_bias_gradient_launches() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}

// ---- the work, and how it is cut (host logic, tested on the host) -------------------
struct strided_sum_shape {
  index_t outputs = 0, length = 0;              // out has `outputs` elements, each a sum of `length`
  index_t output_stride = 0, summed_stride = 0;  // in elements of x
};

inline constexpr int strided_sum_block_x = 32, strided_sum_block_y = 8;  // 256 threads

struct strided_sum_plan {
  bool warp_per_output = false;  // summed axis contiguous: the 32 lanes of a warp share one sum
  int lanes = strided_sum_block_y;   // threads sharing one output's chunk
  index_t outputs_per_block = strided_sum_block_x;
  index_t blocks = 0;            // along grid.x
  index_t splits = 1, chunk = 0; // the summed axis in `splits` chunks of `chunk` (the last may be shorter)
  std::size_t scratch_bytes = 0; // partial sums [splits, outputs] when splits > 1
};

// About four blocks per multiprocessor, chunks of at least 16 elements per
// lane, partial sums no larger than `scratch_limit` bytes.
inline strided_sum_plan plan_strided_sum(const strided_sum_shape& s, std::size_t accumulator_bytes, int multiprocessors,
                                         std::size_t scratch_limit) {
  strided_sum_plan p;
  p.warp_per_output = s.summed_stride == 1 && s.length > 1;
  p.lanes = p.warp_per_output ? strided_sum_block_x : strided_sum_block_y;
  p.outputs_per_block = p.warp_per_output ? strided_sum_block_y : strided_sum_block_x;
  p.blocks = (s.outputs + p.outputs_per_block - 1) / p.outputs_per_block;
  const index_t wanted = (index_t(4) * (multiprocessors > 0 ? multiprocessors : 1) + p.blocks - 1) / p.blocks;
  const index_t by_length = s.length / (index_t(p.lanes) * 16);
  const index_t by_scratch = index_t(scratch_limit / (std::size_t(s.outputs) * accumulator_bytes));
  index_t splits = wanted < by_length ? wanted : by_length;
  splits = splits < by_scratch ? splits : by_scratch;
  splits = splits < 65535 ? splits : 65535;  // grid.y
  if (splits < 2) splits = 1;
  p.chunk = (s.length + splits - 1) / splits;
  p.splits = p.chunk > 0 ? (s.length + p.chunk - 1) / p.chunk : 1;
  p.scratch_bytes = p.splits > 1 ? std::size_t(p.splits) * std::size_t(s.outputs) * accumulator_bytes : 0;
  return p;
}

// What thread `lane` of the threads sharing output `output` adds of chunk `split`.
template <class G, class In>
FUSOR_HOST_DEVICE inline G strided_partial_sum(const In* x, const strided_sum_shape& s, const strided_sum_plan& p,
                                               index_t output, index_t split, int lane) {
  const index_t first = split * p.chunk;
  const index_t last = first + p.chunk < s.length ? first + p.chunk : s.length;
  const In* line = x + output * s.output_stride;
  G sum = G(0);
  for (index_t k = first + lane; k < last; k += p.lanes) sum += convert<G>(line[k * s.summed_stride]);
  return sum;
}

// The accumulator of sums of T: fp64 for fp64, fp32 otherwise.
template <class T>
using strided_sum_accumulator_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class In, class Out, class G>
struct strided_sum_job {
  const In* x;
  Out* out;
  G* partials;  // [splits, outputs], or null: each sum is whole, written to out
  strided_sum_shape shape;
  strided_sum_plan plan;
};

inline constexpr int strided_sum_threads = strided_sum_block_x * strided_sum_block_y;
struct strided_sum_column_tag;

// One block of the sums (a grid of plan.blocks x plan.splits blocks of
// strided_sum_threads), written against a Simt policy (warp_mma.hpp): on the
// GPU in strided_sum_kernel, in the host tests under the SIMT emulator.
// Thread t is (x, y) = (t % 32, t / 32) of a 32 x 8 block.
template <class Simt, class In, class Out, class G>
FUSOR_DEVICE void strided_sum_block(const strided_sum_job<In, Out, G>& job) {
  const int t = Simt::thread(), x = t % strided_sum_block_x, y = t / strided_sum_block_x;
  const index_t split = Simt::block_y();
  index_t output;
  G sum;
  if (job.plan.warp_per_output) {
    // Warp y reads output `output`'s chunk contiguously; lane 0 keeps the butterfly's sum.
    output = Simt::block_x() * strided_sum_block_y + y;
    sum = output < job.shape.outputs ? strided_partial_sum<G>(job.x, job.shape, job.plan, output, split, x) : G(0);
    sum = warp_butterfly<Simt>(sum, [](G a, G b) { return a + b; });
    if (x != 0) return;
  } else {
    // Column x of the block: neighbouring threads read neighbouring outputs (coalesced);
    // row y of `column` holds slice y's sums, added by the first row in slice order.
    G* const column = Simt::template shared_array<G, strided_sum_threads, strided_sum_column_tag>();
    output = Simt::block_x() * strided_sum_block_x + x;
    Simt::store_shared(&column[t], output < job.shape.outputs
                                       ? strided_partial_sum<G>(job.x, job.shape, job.plan, output, split, y)
                                       : G(0));
    Simt::sync_block();
    if (y != 0) return;
    sum = Simt::load_shared(&column[x]);
    for (int r = 1; r < strided_sum_block_y; ++r) sum += Simt::load_shared(&column[r * strided_sum_block_x + x]);
  }
  if (output >= job.shape.outputs) return;
  if (job.partials) job.partials[split * job.shape.outputs + output] = sum;
  else job.out[output] = convert<Out>(sum);
}

inline constexpr int strided_sum_finish_threads = 256;

// The chunks' partial sums, added in chunk order: a thread an output.
template <class Simt, class In, class Out, class G>
FUSOR_DEVICE void strided_sum_finish_block(const strided_sum_job<In, Out, G>& job) {
  const index_t output = Simt::block_x() * strided_sum_finish_threads + Simt::thread();
  if (output >= job.shape.outputs) return;
  G sum = job.partials[output];
  for (index_t s = 1; s < job.plan.splits; ++s) sum += job.partials[s * job.shape.outputs + output];
  job.out[output] = convert<Out>(sum);
}

// Blocks of the finishing kernel.
inline index_t strided_sum_finish_blocks(const strided_sum_shape& s) {
  return (s.outputs + strided_sum_finish_threads - 1) / strided_sum_finish_threads;
}

#if FUSOR_HAS_CUDA
template <class In, class Out, class G>
__global__ void __launch_bounds__(strided_sum_threads) strided_sum_kernel(const strided_sum_job<In, Out, G> job) {
  strided_sum_block<device_simt>(job);
}
template <class In, class Out, class G>
__global__ void __launch_bounds__(strided_sum_finish_threads)
    strided_sum_finish_kernel(const strided_sum_job<In, Out, G> job) {
  strided_sum_finish_block<device_simt>(job);
}

// out = the sums of x (device pointers), on `stream`; `scratch` holds at least
// plan.scratch_bytes and is used only by work enqueued here.
template <class G, class In, class Out>
void launch_strided_sum(Out* out, const In* x, const strided_sum_shape& shape, const strided_sum_plan& plan,
                        void* scratch, cudaStream_t stream) {
  const strided_sum_job<In, Out, G> job{x, out, plan.splits > 1 ? static_cast<G*>(scratch) : nullptr, shape, plan};
  const dim3 grid(unsigned(plan.blocks), unsigned(plan.splits));
  strided_sum_kernel<In, Out, G><<<grid, strided_sum_threads, 0, stream>>>(job);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  std::uint64_t launches = 1;
  if (plan.splits > 1) {
    strided_sum_finish_kernel<In, Out, G>
        <<<unsigned(strided_sum_finish_blocks(shape)), strided_sum_finish_threads, 0, stream>>>(job);
    FUSOR_CUDA_CHECK(cudaGetLastError());
    ++launches;
  }
  gpu::launch_counter().fetch_add(launches);
  separate_bias_gradient_launches().fetch_add(launches);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
