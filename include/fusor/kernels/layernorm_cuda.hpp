// fusor/kernels/layernorm_cuda.hpp — the CUDA kernels of layernorm and rmsnorm
// (layernorm.hpp), forward and backward.
//
// Forward: a warp (rows up to 1024 elements) or a 512-thread block per row
// (row_reduce.hpp). A contiguous row that fits in registers (up to 16384
// elements) is read once and its variance is two-pass from registers; a
// longer or strided row is read twice, with Welford's running mean and M2
// combined over the group. One launch.
//
// Backward: each group (warp or block) owns an accumulator row for dweight
// (and dbias) in shared memory — in global scratch when the row is too long for
// shared memory — into which each thread adds only the columns it owns, so no
// atomics are needed. At the end each block sums its groups in order into one
// partial row, and a second kernel sums the blocks' partial rows in order:
// dweight and dbias are deterministic for a given device and shape. Two launches.
//
// Rows and element offsets are index_t (tensors past 2^31 elements); columns
// within a row are int, rows being at most detail::max_row_length (rows.hpp,
// checked before the launch), and an accumulator row of 2n is indexed in index_t.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <algorithm>

#include <cuda/std/cmath>

#include "fusor/core/buffer.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/layernorm_host.hpp"
#include "fusor/kernels/row_reduce.hpp"

namespace fusor::detail {

template <class S>
struct two_sums {
  S first;
  S second;
};
struct add_two_sums {
  template <class S>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE two_sums<S> operator()(const two_sums<S>& a, const two_sums<S>& b) const {
    return {a.first + b.first, a.second + b.second};
  }
};

// ---- forward -----------------------------------------------------------------------------
// Mean and rstd of one row; `Cached`: the row fits the group's registers.
template <class Group, bool Centered, bool Contiguous, bool Cached, class F>
__device__ FUSOR_FORCE_INLINE void norm_forward_row(const F& f, index_t r, float epsilon) {
  using X = std::remove_const_t<std::remove_pointer_t<decltype(f.x.data)>>;
  using Y = std::remove_pointer_t<decltype(f.y.data)>;
  using W = std::remove_pointer_t<decltype(f.weight.data)>;
  using B = std::remove_pointer_t<decltype(f.bias.data)>;
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<Y, X, W, B>;
  constexpr int items = Cached ? cached_items<V, cached_bytes<X>> : 1;
  constexpr int step = Group::threads * V;
  const int n = int(f.x.length);
  const X* in = f.x.row(r);
  Y* out = f.y.row(r);
  auto load_x = [&](int c) { return load_columns<Contiguous, V>(in, c, n, f.x.column_stride); };

  S mean = 0, variance = 0;
  lanes<X, V> cache[items];
  if constexpr (Cached) {
    if constexpr (Centered) {
      S sum = 0;
      FUSOR_UNROLL
      for (int k = 0; k < items; ++k) {
        cache[k] = load_x(Group::template column<V>(k));
        FUSOR_UNROLL
        for (int j = 0; j < V; ++j) sum += convert<S>(cache[k][j]);  // zero past the end
      }
      mean = Group::all_reduce(sum, sum_op{}) / S(n);
    }
    S squares = 0;
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if constexpr (!Centered) cache[k] = load_x(c);
      const int valid = valid_columns(c, n, V);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) {
        const S d = convert<S>(cache[k][j]) - mean;
        if (j < valid) squares += d * d;
      }
    }
    variance = Group::all_reduce(squares, sum_op{}) / S(n);
  } else if constexpr (Centered) {
    mean_and_m2<S> stats{0, 0, 0};
    for (int c = Group::template column<V>(0); c < n; c += step) {
      const lanes<X, V> v = load_x(c);
      const int valid = valid_columns(c, n, V);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j)
        if (j < valid) stats.add(convert<S>(v[j]));
    }
    stats = Group::all_reduce(stats, combine_mean_and_m2{});
    mean = stats.mean;
    variance = stats.m2 / S(n);
  } else {
    S squares = 0;
    for (int c = Group::template column<V>(0); c < n; c += step) {
      const lanes<X, V> v = load_x(c);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) squares += convert<S>(v[j]) * convert<S>(v[j]);  // zero past the end
    }
    variance = Group::all_reduce(squares, sum_op{}) / S(n);
  }
  const S rstd = S(1) / ::cuda::std::sqrt(variance + S(epsilon));

  auto write = [&](int c, const lanes<X, V>& v) {
    const lanes<W, V> w = load_columns<Contiguous, V>(f.weight.data, c, n, f.weight.stride);
    lanes<S, V> result;
    if constexpr (Centered) {
      const lanes<B, V> b = load_columns<Contiguous, V>(f.bias.data, c, n, f.bias.stride);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) result[j] = (convert<S>(v[j]) - mean) * rstd * convert<S>(w[j]) + convert<S>(b[j]);
    } else {
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) result[j] = convert<S>(v[j]) * rstd * convert<S>(w[j]);
    }
    store_columns<Contiguous, V>(out, c, n, f.y.column_stride, result);
  };
  if constexpr (Cached) {
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if (c < n) write(c, cache[k]);
    }
  } else {
    for (int c = Group::template column<V>(0); c < n; c += step) write(c, load_x(c));
  }
  if (Group::lane() == 0) {
    if constexpr (Centered) f.mean[r] = convert<std::remove_pointer_t<decltype(f.mean.data)>>(mean);
    f.rstd[r] = convert<std::remove_pointer_t<decltype(f.rstd.data)>>(rstd);
  }
}

template <int Threads, bool Centered, class Y, class M, class R, class X, class W, class B>
__global__ void __launch_bounds__(row_group<Threads>::block_threads, row_group<Threads>::min_blocks)
    norm_forward_kernel(const norm_forward<Y, M, R, X, W, B> f, const float epsilon) {
  using group = row_group<Threads>;
  const bool fits = f.x.length <= group::template capacity<vector_lanes<Y, X, W, B>, cached_bytes<X>>;
  const bool parameters_contiguous = f.weight.vector_ok() && (!Centered || f.bias.vector_ok());
  for (index_t r = group::first_row(); r < f.x.rows; r += group::row_step()) {
    const bool contiguous = parameters_contiguous && f.x.vector_row(f.x.row(r)) && f.y.vector_row(f.y.row(r));
    if (contiguous && fits)
      norm_forward_row<group, Centered, true, true>(f, r, epsilon);
    else if (contiguous)
      norm_forward_row<group, Centered, true, false>(f, r, epsilon);
    else
      norm_forward_row<group, Centered, false, false>(f, r, epsilon);
  }
}

template <bool Centered, class Y, class M, class R, class X, class W, class B>
void norm_forward_cuda(const norm_forward<Y, M, R, X, W, B>& f, float epsilon, const cuda_executor& ex) {
  gpu::require(Centered ? "layernorm on the cuda executor" : "rmsnorm on the cuda executor");
  if (f.x.rows == 0 || f.x.length == 0) return;
  using warp = row_group<32>;
  using block = row_group<block_row_threads>;
  if (f.x.length <= warp::capacity<vector_lanes<Y, X, W, B>, cached_bytes<X>>)
    launch_kernel<norm_forward_kernel<32, Centered, Y, M, R, X, W, B>>(row_blocks<warp>(f.x.rows),
                                                                      warp::block_threads, 0, ex.stream, f, epsilon);
  else
    launch_kernel<norm_forward_kernel<block_row_threads, Centered, Y, M, R, X, W, B>>(
        row_blocks<block>(f.x.rows), block::block_threads, 0, ex.stream, f, epsilon);
}

// ---- backward ------------------------------------------------------------------------------
// dx of one row, and its terms added into the group's accumulator row `acc`
// (dweight in [0, n), dbias in [n, 2n)) at the columns this thread owns.
template <class Group, bool Centered, bool Contiguous, bool Cached, class Bk, class S>
__device__ FUSOR_FORCE_INLINE void norm_backward_row(const Bk& b, index_t r, S* acc) {
  using DX = std::remove_pointer_t<decltype(b.dx.data)>;
  using DY = std::remove_const_t<std::remove_pointer_t<decltype(b.dy.data)>>;
  using X = std::remove_const_t<std::remove_pointer_t<decltype(b.x.data)>>;
  using W = std::remove_pointer_t<decltype(b.weight.data)>;
  constexpr int V = vector_lanes<DX, DY, X, W>;
  constexpr int items = Cached ? cached_items<V, cached_bytes<X, DY>> : 1;
  constexpr int step = Group::threads * V;
  const int n = int(b.x.length);
  const X* xr = b.x.row(r);
  const DY* gr = b.dy.row(r);
  DX* dxr = b.dx.row(r);
  const S mean = Centered ? convert<S>(b.mean[r]) : S(0), rstd = convert<S>(b.rstd[r]);
  auto load_x = [&](int c) { return load_columns<Contiguous, V>(xr, c, n, b.x.column_stride); };
  auto load_dy = [&](int c) { return load_columns<Contiguous, V>(gr, c, n, b.dy.column_stride); };
  auto load_w = [&](int c) { return load_columns<Contiguous, V>(b.weight.data, c, n, b.weight.stride); };
  auto sums_of = [&](int c, const lanes<X, V>& x, const lanes<DY, V>& dy) {
    const lanes<W, V> w = load_w(c);
    const int valid = valid_columns(c, n, V);
    two_sums<S> t{0, 0};
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S g = convert<S>(dy[j]) * convert<S>(w[j]);
      if (j < valid) t = {t.first + g, t.second + g * (convert<S>(x[j]) - mean) * rstd};
    }
    return t;
  };
  two_sums<S> sums{0, 0};
  lanes<X, V> xcache[items];
  lanes<DY, V> gcache[items];
  if constexpr (Cached) {
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      xcache[k] = load_x(c);
      gcache[k] = load_dy(c);
      sums = add_two_sums{}(sums, sums_of(c, xcache[k], gcache[k]));
    }
  } else {
    for (int c = Group::template column<V>(0); c < n; c += step) sums = add_two_sums{}(sums, sums_of(c, load_x(c), load_dy(c)));
  }
  sums = Group::all_reduce(sums, add_two_sums{});
  const S mean_g = Centered ? sums.first / S(n) : S(0), mean_gx = sums.second / S(n);

  auto write = [&](int c, const lanes<X, V>& x, const lanes<DY, V>& dy) {
    const lanes<W, V> w = load_w(c);
    const int valid = valid_columns(c, n, V);
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S xhat = (convert<S>(x[j]) - mean) * rstd, g = convert<S>(dy[j]);
      result[j] = rstd * (g * convert<S>(w[j]) - mean_g - xhat * mean_gx);
      if (j < valid) {
        acc[c + j] += g * xhat;
        if constexpr (Centered) acc[index_t(n) + c + j] += g;
      }
    }
    store_columns<Contiguous, V>(dxr, c, n, b.dx.column_stride, result);
  };
  if constexpr (Cached) {
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if (c < n) write(c, xcache[k], gcache[k]);
    }
  } else {
    for (int c = Group::template column<V>(0); c < n; c += step) write(c, load_x(c), load_dy(c));
  }
}

// `global_accumulators`: one accumulator row per group in global memory, or
// null to keep them in dynamic shared memory. `partials`: one row per block.
template <int Threads, bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
__global__ void __launch_bounds__(row_group<Threads>::block_threads, row_group<Threads>::min_blocks)
    norm_backward_kernel(const norm_backward<DX, DW, DB, DY, X, W, M, R> b, statistic_t<X>* global_accumulators,
                         statistic_t<X>* partials) {
  using S = statistic_t<X>;
  using group = row_group<Threads>;
  constexpr int V = vector_lanes<DX, DY, X, W>;
  extern __shared__ __align__(16) unsigned char shared_accumulators[];
  const int n = int(b.x.length);
  const index_t width = Centered ? 2 * index_t(n) : index_t(n);
  S* const block_accumulators = global_accumulators
                                    ? global_accumulators + index_t(blockIdx.x) * group::per_block * width
                                    : reinterpret_cast<S*>(shared_accumulators);
  S* const acc = block_accumulators + group::index() * width;
  for (int c = group::template column<V>(0); c < n; c += group::threads * V)
    for (int j = 0; j < valid_columns(c, n, V); ++j) {
      acc[c + j] = S(0);
      if constexpr (Centered) acc[index_t(n) + c + j] = S(0);
    }

  const bool fits = n <= group::template capacity<V, cached_bytes<X, DY>>;
  for (index_t r = group::first_row(); r < b.x.rows; r += group::row_step()) {
    const bool contiguous = b.weight.vector_ok() && b.x.vector_row(b.x.row(r)) && b.dy.vector_row(b.dy.row(r)) &&
                            b.dx.vector_row(b.dx.row(r));
    if (contiguous && fits)
      norm_backward_row<group, Centered, true, true>(b, r, acc);
    else if (contiguous)
      norm_backward_row<group, Centered, true, false>(b, r, acc);
    else
      norm_backward_row<group, Centered, false, false>(b, r, acc);
  }
  __syncthreads();
  for (index_t c = threadIdx.x; c < width; c += blockDim.x) {
    S total = 0;
    for (int g = 0; g < group::per_block; ++g) total += block_accumulators[g * width + c];
    partials[index_t(blockIdx.x) * width + c] = total;
  }
}

// dweight (and dbias) from the blocks' partial rows, summed in block order.
template <bool Centered, class DW, class DB, class S>
__global__ void norm_parameter_sums_kernel(const S* partials, int blocks, index_t n, per_column<DW> dweight,
                                           per_column<DB> dbias) {
  const index_t width = Centered ? 2 * n : n;
  for (index_t c = index_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n; c += index_t(gridDim.x) * blockDim.x) {
    S dw = 0, db = 0;
    for (int block = 0; block < blocks; ++block) {
      dw += partials[block * width + c];
      if constexpr (Centered) db += partials[block * width + n + c];
    }
    dweight[c] = convert<DW>(dw);
    if constexpr (Centered) dbias[c] = convert<DB>(db);
  }
}

template <class Group, bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward_launch(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b, const cuda_executor& ex) {
  using S = statistic_t<X>;
  constexpr auto kernel = norm_backward_kernel<Group::threads, Centered, DX, DW, DB, DY, X, W, M, R>;
  const index_t n = b.x.length;
  const index_t width = Centered ? 2 * n : n;

  int device = 0, shared_limit = 0, per_sm = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  FUSOR_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const std::size_t shared_bytes = std::size_t(Group::per_block) * std::size_t(width) * sizeof(S);
  const bool in_shared = shared_bytes + attributes.sharedSizeBytes <= std::size_t(shared_limit);
  const std::size_t dynamic_shared = in_shared ? shared_bytes : 0;
  if (in_shared && dynamic_shared > 48 * 1024)
    FUSOR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_shared)));
  FUSOR_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Group::block_threads, dynamic_shared));
  const index_t wanted = (b.x.rows + Group::per_block - 1) / Group::per_block;
  const int grid = int(std::clamp<index_t>(std::min<index_t>(wanted, index_t(gpu::multiprocessor_count()) * std::max(per_sm, 1)),
                                           1, max_row_blocks));

  buffer<device_space> partials(std::size_t(grid) * std::size_t(width) * sizeof(S), ex.stream);
  buffer<device_space> accumulators(in_shared ? 0 : shared_bytes * std::size_t(grid), ex.stream);
  launch_kernel<kernel>(grid, Group::block_threads, dynamic_shared, ex.stream, b, accumulators.as<S>(),
                        partials.as<S>());
  const int column_grid = int(std::clamp<index_t>((n + 255) / 256, 1, max_row_blocks));
  launch_kernel<norm_parameter_sums_kernel<Centered, DW, DB, S>>(column_grid, 256, 0, ex.stream, partials.as<S>(),
                                                                 grid, n, b.dweight, b.dbias);
}

template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward_cuda(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b, const cuda_executor& ex) {
  gpu::require(Centered ? "layernorm_backward on the cuda executor" : "rmsnorm_backward on the cuda executor");
  if (b.x.length == 0) return;
  if (b.x.rows == 0) {  // no rows: the parameter gradients are zero
    launch_kernel<norm_parameter_sums_kernel<Centered, DW, DB, statistic_t<X>>>(
        int(std::clamp<index_t>((b.x.length + 255) / 256, 1, max_row_blocks)), 256, 0, ex.stream,
        static_cast<const statistic_t<X>*>(nullptr), 0, b.x.length, b.dweight, b.dbias);
    return;
  }
  if (b.x.length <= row_group<32>::capacity<vector_lanes<DX, DY, X, W>, cached_bytes<X, DY>>)
    norm_backward_launch<row_group<32>, Centered>(b, ex);
  else
    norm_backward_launch<row_group<block_row_threads>, Centered>(b, ex);
}

}  // namespace fusor::detail

#endif  // FUSOR_HAS_CUDA
