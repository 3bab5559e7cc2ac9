// fusor/kernels/softmax.hpp — softmax and log-softmax along the last axis,
// forward and backward, under the host and the cuda executor.
//
//   softmax(y, x);                        y  = exp(x - max) / sum(exp(x - max))   per row
//   log_softmax(y, x, ex);                y  = x - max - log(sum(exp(x - max)))
//   softmax_backward(dx, y, dy, ex);      dx = y * (dy - sum(dy * y))             (y: softmax output)
//   log_softmax_backward(dx, y, dy, ex);  dx = dy - exp(y) * sum(dy)              (y: log-softmax output)
//
// Rows are the last axis of views of any rank and layout (see rows.hpp); every
// operand may have its own precision. Statistics are fp32 for bf16/fp16/fp32
// storage (fp64 for fp64), with the row's max subtracted; results are rounded
// once, into the output's precision. y may be x, and dx may be dy (in place).
//
// Special values: a row holding a NaN gives a NaN row, never a silent number.
// A row holding +inf, and a row that is all -inf, give NaN rows too, as
// PyTorch does (both make exp(x - max) = exp(NaN)); a -inf among finite values
// gives 0 (softmax) or -inf (log-softmax).
//
// On the GPU one warp takes a row of up to 1024 elements (2048 at 16 bits) and
// one 512-thread block a longer one (row_reduce.hpp). A row of up to 16384
// elements (32768 at 16 bits) is read once, into registers; a longer one is
// read twice (online max and sum, then the outputs). A row with unit column
// stride and 16-byte-aligned start moves in 16-byte vectors; any other layout
// takes element accesses, which are correct but slower. One launch per call.
#pragma once

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/exec/host.hpp"
#include "fusor/kernels/rows.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/row_reduce.hpp"
#endif

namespace fusor {
namespace detail {

// ---- host ------------------------------------------------------------------------------
// One row. Plain functions of pointers and strides (not lambdas over captured
// pointers): the vectoriser then sees the pointers invariant and the accesses
// contiguous when the strides are the compile-time 1 of with_unit_strides.
template <bool Log, class S, class Y, class X, class SY, class SX>
void softmax_row_host(Y* out, const X* in, index_t n, SY sy, SX sx, S* e) {
  S m = -::cuda::std::numeric_limits<S>::infinity();
  FUSOR_OMP_SIMD(reduction(max : m))
  for (index_t j = 0; j < n; ++j) {
    const S v = convert<S>(in[j * sx]);
    m = v > m ? v : m;  // passes over NaN, which then makes the sum NaN
  }
  if constexpr (Log) {
    const S s = row_sum<S>(n, [=](index_t j) { return host_exp(convert<S>(in[j * sx]) - m); });
    const S log_s = ::cuda::std::log(s);
    FUSOR_OMP_SIMD()
    for (index_t j = 0; j < n; ++j) out[j * sy] = convert<Y>(convert<S>(in[j * sx]) - m - log_s);
  } else {
    const S s = row_sum<S>(n, [=](index_t j) { return e[j] = host_exp(convert<S>(in[j * sx]) - m); });
    const S inverse = S(1) / s;
    FUSOR_OMP_SIMD()
    for (index_t j = 0; j < n; ++j) out[j * sy] = convert<Y>(e[j] * inverse);
  }
}

template <bool Log, class Y, class X>
void softmax_host(const row_matrix<Y>& y, const row_matrix<const X>& x, const host_executor& ex) {
  using S = statistic_t<X>;
  for_each_row<S>(ex, x.rows, x.length, Log ? 0 : x.length, [&](index_t r, S* scratch) {
    with_unit_strides([&](auto sy, auto sx) { softmax_row_host<Log>(y.row(r), x.row(r), x.length, sy, sx, scratch); },
                      y.column_stride, x.column_stride);
  });
}

template <bool Log, class S, class DX, class Y, class DY, class SDX, class SY, class SDY>
void softmax_backward_row_host(DX* dxr, const Y* yr, const DY* dyr, index_t n, SDX sdx, SY sy, SDY sdy) {
  const S sum = row_sum<S>(n, [=](index_t j) {
    return Log ? convert<S>(dyr[j * sdy]) : convert<S>(dyr[j * sdy]) * convert<S>(yr[j * sy]);
  });
  FUSOR_OMP_SIMD()
  for (index_t j = 0; j < n; ++j) {
    const S yv = convert<S>(yr[j * sy]), g = convert<S>(dyr[j * sdy]);
    dxr[j * sdx] = convert<DX>(Log ? g - host_exp(yv) * sum : yv * (g - sum));
  }
}

template <bool Log, class DX, class Y, class DY>
void softmax_backward_host(const row_matrix<DX>& dx, const row_matrix<const Y>& y, const row_matrix<const DY>& dy,
                           const host_executor& ex) {
  using S = statistic_t<Y>;
  for_each_row<S>(ex, y.rows, y.length, 0, [&](index_t r, S*) {
    with_unit_strides(
        [&](auto sdx, auto sy, auto sdy) {
          softmax_backward_row_host<Log, S>(dx.row(r), y.row(r), dy.row(r), y.length, sdx, sy, sdy);
        },
        dx.column_stride, y.column_stride, dy.column_stride);
  });
}

// ---- CUDA ------------------------------------------------------------------------------
#if FUSOR_HAS_CUDA
// One row, read once into registers (at most Group::capacity elements).
template <class Group, bool Contiguous, bool Log, class Y, class X>
__device__ FUSOR_FORCE_INLINE void softmax_row_cached(Y* out, const X* in, int n, index_t out_stride,
                                                      index_t in_stride) {
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<X, Y>;
  constexpr int items = cached_items<V, cached_bytes<X>>;
  lanes<X, V> cache[items];
  S m = -::cuda::std::numeric_limits<S>::infinity();
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const int c = Group::template column<V>(k);
    cache[k] = load_columns<Contiguous, V>(in, c, n, in_stride);
    const int valid = valid_columns(c, n, V);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) m = ::cuda::std::fmax(m, convert<S>(cache[k][j]));
  }
  m = Group::all_reduce(m, max_op{});
  S s = 0;
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const int valid = valid_columns(Group::template column<V>(k), n, V);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) s += ::cuda::std::exp(convert<S>(cache[k][j]) - m);
  }
  s = Group::all_reduce(s, sum_op{});
  const S log_s = ::cuda::std::log(s), inverse = S(1) / s;
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const int c = Group::template column<V>(k);
    if (c >= n) continue;
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S v = convert<S>(cache[k][j]);
      result[j] = Log ? v - m - log_s : ::cuda::std::exp(v - m) * inverse;
    }
    store_columns<Contiguous, V>(out, c, n, out_stride, result);
  }
}

// One row of any length, read twice: online max and sum, then the outputs.
template <class Group, bool Contiguous, bool Log, class Y, class X>
__device__ FUSOR_FORCE_INLINE void softmax_row_looped(Y* out, const X* in, int n, index_t out_stride,
                                                      index_t in_stride) {
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<X, Y>;
  constexpr int step = Group::threads * V;
  max_and_sum<S> stats{-::cuda::std::numeric_limits<S>::infinity(), S(0)};
  for (int c = Group::template column<V>(0); c < n; c += step)
    stats.add(load_columns<Contiguous, V>(in, c, n, in_stride), valid_columns(c, n, V));
  stats = Group::all_reduce(stats, combine_max_and_sum{});
  const S m = stats.max, log_s = ::cuda::std::log(stats.sum), inverse = S(1) / stats.sum;
  for (int c = Group::template column<V>(0); c < n; c += step) {
    const lanes<X, V> v = load_columns<Contiguous, V>(in, c, n, in_stride);
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S e = convert<S>(v[j]);
      result[j] = Log ? e - m - log_s : ::cuda::std::exp(e - m) * inverse;
    }
    store_columns<Contiguous, V>(out, c, n, out_stride, result);
  }
}

// Contiguous rows that fit are cached; any other row is read twice.
template <int Threads, bool Log, class Y, class X>
__global__ void __launch_bounds__(row_group<Threads>::block_threads, row_group<Threads>::min_blocks)
    softmax_kernel(const row_matrix<Y> y, const row_matrix<const X> x) {
  using group = row_group<Threads>;
  const int n = int(x.length);
  const bool fits = n <= group::template capacity<vector_lanes<X, Y>, cached_bytes<X>>;
  for (index_t r = group::first_row(); r < x.rows; r += group::row_step()) {
    const X* in = x.row(r);
    Y* out = y.row(r);
    const bool contiguous = x.vector_row(in) && y.vector_row(out);
    if (contiguous && fits)
      softmax_row_cached<group, true, Log>(out, in, n, 1, 1);
    else if (contiguous)
      softmax_row_looped<group, true, Log>(out, in, n, 1, 1);
    else
      softmax_row_looped<group, false, Log>(out, in, n, y.column_stride, x.column_stride);
  }
}

// dx for one row; the row is cached in registers when it fits.
template <class Group, bool Contiguous, bool Log, class DX, class Y, class DY>
__device__ FUSOR_FORCE_INLINE void softmax_backward_row(DX* dxr, const Y* yr, const DY* dyr, int n,
                                                        const row_matrix<DX>& dx, const row_matrix<const Y>& y,
                                                        const row_matrix<const DY>& dy) {
  using S = statistic_t<Y>;
  constexpr int V = vector_lanes<DX, Y, DY>;
  constexpr int items = cached_items<V, cached_bytes<Y, DY>>;
  constexpr int step = Group::threads * V;
  auto load_y = [&](int c) { return load_columns<Contiguous, V>(yr, c, n, y.column_stride); };
  auto load_dy = [&](int c) { return load_columns<Contiguous, V>(dyr, c, n, dy.column_stride); };
  auto sum_term = [](const lanes<Y, V>& yv, const lanes<DY, V>& g, int valid) {
    S t = 0;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) t += Log ? convert<S>(g[j]) : convert<S>(g[j]) * convert<S>(yv[j]);
    return t;
  };
  auto write = [&](int c, const lanes<Y, V>& yv, const lanes<DY, V>& g, S sum) {
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S yj = convert<S>(yv[j]), gj = convert<S>(g[j]);
      result[j] = Log ? gj - ::cuda::std::exp(yj) * sum : yj * (gj - sum);
    }
    store_columns<Contiguous, V>(dxr, c, n, dx.column_stride, result);
  };
  if (Contiguous && n <= Group::template capacity<V, cached_bytes<Y, DY>>) {
    lanes<Y, V> ycache[items];
    lanes<DY, V> gcache[items];
    S sum = 0;
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      ycache[k] = load_y(c);
      gcache[k] = load_dy(c);
      sum += sum_term(ycache[k], gcache[k], valid_columns(c, n, V));
    }
    sum = Group::all_reduce(sum, sum_op{});
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if (c < n) write(c, ycache[k], gcache[k], sum);
    }
  } else {
    S sum = 0;
    for (int c = Group::template column<V>(0); c < n; c += step)
      sum += sum_term(load_y(c), load_dy(c), valid_columns(c, n, V));
    sum = Group::all_reduce(sum, sum_op{});
    for (int c = Group::template column<V>(0); c < n; c += step) write(c, load_y(c), load_dy(c), sum);
  }
}

template <int Threads, bool Log, class DX, class Y, class DY>
__global__ void __launch_bounds__(row_group<Threads>::block_threads, row_group<Threads>::min_blocks)
    softmax_backward_kernel(const row_matrix<DX> dx, const row_matrix<const Y> y, const row_matrix<const DY> dy) {
  using group = row_group<Threads>;
  const int n = int(y.length);
  for (index_t r = group::first_row(); r < y.rows; r += group::row_step()) {
    const Y* yr = y.row(r);
    const DY* dyr = dy.row(r);
    DX* dxr = dx.row(r);
    if (y.vector_row(yr) && dy.vector_row(dyr) && dx.vector_row(dxr))
      softmax_backward_row<group, true, Log>(dxr, yr, dyr, n, dx, y, dy);
    else
      softmax_backward_row<group, false, Log>(dxr, yr, dyr, n, dx, y, dy);
  }
}

template <bool Log, class Y, class X>
void softmax_cuda(const row_matrix<Y>& y, const row_matrix<const X>& x, const cuda_executor& ex) {
  cuda::require("softmax on the cuda executor");
  if (x.rows == 0 || x.length == 0) return;
  using warp = row_group<32>;
  using block = row_group<block_row_threads>;
  if (x.length <= warp::capacity<vector_lanes<X, Y>, cached_bytes<X>>)
    launch_kernel<softmax_kernel<32, Log, Y, X>>(row_blocks<warp>(x.rows), warp::block_threads, 0, ex.stream, y, x);
  else
    launch_kernel<softmax_kernel<block_row_threads, Log, Y, X>>(row_blocks<block>(x.rows), block::block_threads, 0,
                                                               ex.stream, y, x);
}

template <bool Log, class DX, class Y, class DY>
void softmax_backward_cuda(const row_matrix<DX>& dx, const row_matrix<const Y>& y, const row_matrix<const DY>& dy,
                           const cuda_executor& ex) {
  cuda::require("softmax_backward on the cuda executor");
  if (y.rows == 0 || y.length == 0) return;
  using warp = row_group<32>;
  using block = row_group<block_row_threads>;
  if (y.length <= warp::capacity<vector_lanes<DX, Y, DY>, cached_bytes<Y, DY>>)
    launch_kernel<softmax_backward_kernel<32, Log, DX, Y, DY>>(row_blocks<warp>(y.rows), warp::block_threads, 0,
                                                              ex.stream, dx, y, dy);
  else
    launch_kernel<softmax_backward_kernel<block_row_threads, Log, DX, Y, DY>>(
        row_blocks<block>(y.rows), block::block_threads, 0, ex.stream, dx, y, dy);
}
#endif  // FUSOR_HAS_CUDA

// Shapes checked, operands as rows.
template <class Y, class X>
auto softmax_operands(const char* op, const Y& y, const X& x) {
  require_same_shape(op, "the output", y, "the input", x);
  return std::pair{rows_of(y), as_input(rows_of(x))};
}
template <class DX, class Y, class DY>
auto softmax_backward_operands(const char* op, const DX& dx, const Y& y, const DY& dy) {
  require_same_shape(op, "dx", dx, "y", y);
  require_same_shape(op, "dy", dy, "y", y);
  return std::tuple{rows_of(dx), as_input(rows_of(y)), as_input(rows_of(dy))};
}

}  // namespace detail

#define FUSOR_SOFTMAX_FORWARD(name, is_log)                                                                   \
  template <row_operand Y, row_operand X>                                                                      \
  void name(const Y& y, const X& x, const host_executor& ex = {}) {                                            \
    static_assert(detail::host_reachable_v<Y, X>,                                                              \
                  "fusor: " #name " on the host executor needs its operands in host-accessible memory");      \
    const auto [ym, xm] = detail::softmax_operands(#name, as_view(y), as_view(x));                             \
    detail::softmax_host<is_log>(ym, xm, ex);                                                                  \
  }
#define FUSOR_SOFTMAX_BACKWARD(name, is_log)                                                                  \
  template <row_operand DX, row_operand Y, row_operand DY>                                                     \
  void name(const DX& dx, const Y& y, const DY& dy, const host_executor& ex = {}) {                            \
    static_assert(detail::host_reachable_v<DX, Y, DY>,                                                         \
                  "fusor: " #name " on the host executor needs its operands in host-accessible memory");      \
    const auto [dxm, ym, dym] = detail::softmax_backward_operands(#name, as_view(dx), as_view(y), as_view(dy)); \
    detail::softmax_backward_host<is_log>(dxm, ym, dym, ex);                                                   \
  }
FUSOR_SOFTMAX_FORWARD(softmax, false)
FUSOR_SOFTMAX_FORWARD(log_softmax, true)
FUSOR_SOFTMAX_BACKWARD(softmax_backward, false)
FUSOR_SOFTMAX_BACKWARD(log_softmax_backward, true)
#undef FUSOR_SOFTMAX_FORWARD
#undef FUSOR_SOFTMAX_BACKWARD

#if FUSOR_HAS_CUDA
#define FUSOR_SOFTMAX_FORWARD(name, is_log)                                                                   \
  template <row_operand Y, row_operand X>                                                                      \
  void name(const Y& y, const X& x, const cuda_executor& ex) {                                                 \
    static_assert(detail::device_reachable_v<Y, X>,                                                            \
                  "fusor: " #name " on the cuda executor needs its operands in device-accessible memory");    \
    const auto [ym, xm] = detail::softmax_operands(#name, as_view(y), as_view(x));                             \
    detail::softmax_cuda<is_log>(ym, xm, ex);                                                                  \
  }
#define FUSOR_SOFTMAX_BACKWARD(name, is_log)                                                                  \
  template <row_operand DX, row_operand Y, row_operand DY>                                                     \
  void name(const DX& dx, const Y& y, const DY& dy, const cuda_executor& ex) {                                 \
    static_assert(detail::device_reachable_v<DX, Y, DY>,                                                       \
                  "fusor: " #name " on the cuda executor needs its operands in device-accessible memory");    \
    const auto [dxm, ym, dym] = detail::softmax_backward_operands(#name, as_view(dx), as_view(y), as_view(dy)); \
    detail::softmax_backward_cuda<is_log>(dxm, ym, dym, ex);                                                   \
  }
FUSOR_SOFTMAX_FORWARD(softmax, false)
FUSOR_SOFTMAX_FORWARD(log_softmax, true)
FUSOR_SOFTMAX_BACKWARD(softmax_backward, false)
FUSOR_SOFTMAX_BACKWARD(log_softmax_backward, true)
#undef FUSOR_SOFTMAX_FORWARD
#undef FUSOR_SOFTMAX_BACKWARD
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor
