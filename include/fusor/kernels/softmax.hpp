// fusor/kernels/softmax.hpp — softmax and log-softmax along the last axis,
// forward and backward, under the host and the cuda executor.
//
//   softmax(y, x);                        y  = exp(x - max) / sum(exp(x - max))   per row
//   log_softmax(y, x, ex);                y  = x - max - log(sum(exp(x - max)))
//   softmax_backward(dx, y, dy, ex);      dx = y * (dy - sum(dy * y))             (y: softmax output)
//   log_softmax_backward(dx, y, dy, ex);  dx = dy - exp(y) * sum(dy)              (y: log-softmax output)
//
// x may be a view, an lvalue tensor or any fusor expression that broadcasts
// to y's shape: softmax(y, x * scale + mask) reads x and mask once per pass
// and never materialises the scaled logits. Rows are the last axis of views of
// any rank and layout (rows.hpp); every operand may have its own precision.
// Statistics are fp32 for bf16/fp16/fp32 storage (fp64 for fp64), with the
// row's max subtracted; results are rounded once, into the output's precision.
// y may be x, and dx may be dy (in place).
//
// Special values: a row holding a NaN gives a NaN row, never a silent number.
// A row holding +inf, and a row that is all -inf, give NaN rows too, as
// PyTorch does (both make exp(x - max) = exp(NaN)); a -inf among finite values
// gives 0 (softmax) or -inf (log-softmax).
//
// The host runs rows over OpenMP threads with vectorised loops (three passes
// over a row, which is in cache by the second). The GPU (softmax_cuda.hpp)
// takes a row per warp up to 1024 elements and per block above that,
// the smallest of 64 to 1024 threads whose registers hold the row, and on
// sm_90 per cluster of up to sixteen 512-thread blocks; a contiguous row of up
// to 32768 elements (clusters: 262144) is read once, into registers
// (backward: 16384 of each of y and dy; clusters: 131072), a longer, strided
// or expression row twice. A row with unit column stride and a 16-byte-aligned start moves
// in 16-byte vectors; other layouts take element accesses: correct, slower.
// One launch per call.
#pragma once

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/exec/host.hpp"
#include "fusor/kernels/rows.hpp"
#include "fusor/kernels/rows_host.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/softmax_cuda.hpp"
#endif

namespace fusor {
namespace detail {

// ---- host ------------------------------------------------------------------------------
// One row. Plain functions of pointers and strides (not lambdas over captured
// pointers): the vectoriser then sees the pointers invariant and the accesses
// contiguous when the strides are the compile-time 1 of with_unit_strides.
template <bool Log, class S, class Y, class In, class SY, class SX>
void softmax_row_host(Y* out, In in, index_t n, SY sy, SX sx, S* e) {
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

// softmax of an expression: its rows are read element by element.
template <bool Log, class Y, class E, std::size_t Rank>
void softmax_expression_host(const row_matrix<Y>& y, const expression_rows<E, Rank>& x, const host_executor& ex) {
  using S = statistic_t<row_value_t<typename expression_rows<E, Rank>::reader>>;
  for_each_row<S>(ex, y.rows, y.length, Log ? 0 : y.length, [&](index_t r, S* scratch) {
    with_unit_strides(
        [&](auto sy) {
          softmax_row_host<Log>(y.row(r), x.row(r), y.length, sy, std::integral_constant<index_t, 1>{}, scratch);
        },
        y.column_stride);
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


// Shapes checked, operands as rows; then the executor's implementation.
template <bool Log, class Executor, class Y, class X>
void run_softmax(const char* op, const Y& y_operand, const X& x_operand, const Executor& ex) {
  const auto& y = as_view(y_operand);
  // A literal, not built from op: nothing is allocated on the path every call takes.
  const char* output = Log ? "the output of log_softmax" : "the output of softmax";
  if constexpr (row_operand<X>) {
    const auto& x = as_view(x_operand);
    require_same_shape(op, "the output", y, "the input", x);
    check_alias(y, x, output);  // y may be x, element for element; not its transpose
    if constexpr (std::is_same_v<Executor, host_executor>) softmax_host<Log>(rows_of(y), as_input(rows_of(x)), ex);
#if FUSOR_HAS_CUDA
    else softmax_cuda<Log>(rows_of(y), as_input(rows_of(x)), ex);
#endif
  } else {
    check_alias(y, as_expression(x_operand), output);
    const auto x = expression_rows_of(op, as_expression(x_operand), y);
    if constexpr (std::is_same_v<Executor, host_executor>) softmax_expression_host<Log>(rows_of(y), x, ex);
#if FUSOR_HAS_CUDA
    else softmax_expression_cuda<Log>(rows_of(y), x, ex);
#endif
  }
}

template <bool Log, class Executor, class DX, class Y, class DY>
void run_softmax_backward(const char* op, const DX& dx_operand, const Y& y_operand, const DY& dy_operand,
                      const Executor& ex) {
  const auto& dx = as_view(dx_operand);
  const auto& y = as_view(y_operand);
  const auto& dy = as_view(dy_operand);
  require_same_shape(op, "dx", dx, "y", y);
  require_same_shape(op, "dy", dy, "y", y);
  const char* dx_of = Log ? "dx of log_softmax_backward" : "dx of softmax_backward";
  check_alias(dx, y, dx_of);  // dx may be y or dy, element for element
  check_alias(dx, dy, dx_of);
  if constexpr (std::is_same_v<Executor, host_executor>)
    softmax_backward_host<Log>(rows_of(dx), as_input(rows_of(y)), as_input(rows_of(dy)), ex);
#if FUSOR_HAS_CUDA
  else
    softmax_backward_cuda<Log>(rows_of(dx), as_input(rows_of(y)), as_input(rows_of(dy)), ex);
#endif
}

// Whether the executor (host: true) can read every leaf of an input.
template <bool Host, class X>
constexpr bool input_reachable() {
  if constexpr (row_operand<X>) return Host ? host_reachable_v<X> : device_reachable_v<X>;
  else return leaves_in<std::remove_cvref_t<decltype(as_expression(std::declval<const X&>()))>>::check(Host);
}

}  // namespace detail

/// An input of softmax and log_softmax: a view, an lvalue tensor, or any fusor
/// expression that broadcasts to the output's shape (softmax(y, x * scale)).
template <class X>
concept softmax_input = row_operand<X> || expression<std::remove_cvref_t<X>>;

/// y = softmax(x) along the last axis.
template <row_operand Y, softmax_input X>
void softmax(const Y& y, const X& x, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Y> && detail::input_reachable<true, X>(),
                "fusor: softmax on the host executor needs its operands in host-accessible memory");
  detail::run_softmax<false>("softmax", y, x, ex);
}
/// y = log(softmax(x)) along the last axis.
template <row_operand Y, softmax_input X>
void log_softmax(const Y& y, const X& x, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Y> && detail::input_reachable<true, X>(),
                "fusor: log_softmax on the host executor needs its operands in host-accessible memory");
  detail::run_softmax<true>("log_softmax", y, x, ex);
}
/// dx = y * (dy - sum(dy * y)), y the output of softmax.
template <row_operand DX, row_operand Y, row_operand DY>
void softmax_backward(const DX& dx, const Y& y, const DY& dy, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<DX, Y, DY>,
                "fusor: softmax_backward on the host executor needs its operands in host-accessible memory");
  detail::run_softmax_backward<false>("softmax_backward", dx, y, dy, ex);
}
/// dx = dy - exp(y) * sum(dy), y the output of log_softmax.
template <row_operand DX, row_operand Y, row_operand DY>
void log_softmax_backward(const DX& dx, const Y& y, const DY& dy, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<DX, Y, DY>,
                "fusor: log_softmax_backward on the host executor needs its operands in host-accessible memory");
  detail::run_softmax_backward<true>("log_softmax_backward", dx, y, dy, ex);
}

#if FUSOR_HAS_CUDA
/// y = softmax(x) along the last axis, queued on the cuda executor's stream.
template <row_operand Y, softmax_input X>
void softmax(const Y& y, const X& x, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Y> && detail::input_reachable<false, X>(),
                "fusor: softmax on the cuda executor needs its operands in device-accessible memory");
  detail::run_softmax<false>("softmax", y, x, ex);
}
/// y = log(softmax(x)) along the last axis, queued on the cuda executor's stream.
template <row_operand Y, softmax_input X>
void log_softmax(const Y& y, const X& x, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Y> && detail::input_reachable<false, X>(),
                "fusor: log_softmax on the cuda executor needs its operands in device-accessible memory");
  detail::run_softmax<true>("log_softmax", y, x, ex);
}
/// dx = y * (dy - sum(dy * y)), y the output of softmax, queued on the cuda executor's stream.
template <row_operand DX, row_operand Y, row_operand DY>
void softmax_backward(const DX& dx, const Y& y, const DY& dy, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<DX, Y, DY>,
                "fusor: softmax_backward on the cuda executor needs its operands in device-accessible memory");
  detail::run_softmax_backward<false>("softmax_backward", dx, y, dy, ex);
}
/// dx = dy - exp(y) * sum(dy), y the output of log_softmax, queued on the cuda executor's stream.
template <row_operand DX, row_operand Y, row_operand DY>
void log_softmax_backward(const DX& dx, const Y& y, const DY& dy, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<DX, Y, DY>,
                "fusor: log_softmax_backward on the cuda executor needs its operands in device-accessible memory");
  detail::run_softmax_backward<true>("log_softmax_backward", dx, y, dy, ex);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor
