// fusor/kernels/layernorm.hpp — layer normalisation and RMS normalisation over
// the last axis, forward and backward, under the host and the cuda executor.
//
//   layernorm(y, mean, rstd, x, weight, bias, options, ex);
//       y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + epsilon)  per row
//   layernorm_backward(dx, dweight, dbias, dy, x, weight, mean, rstd, ex);
//   rmsnorm(y, rstd, x, weight, options, ex);
//       y = x * rstd * weight,  rstd = 1 / sqrt(mean(x^2) + epsilon)
//   rmsnorm_backward(dx, dweight, dy, x, weight, rstd, ex);
//
// The forward saves one mean and one rstd per row (shape [rows] or the leading
// shape of x) for the backward. The variance is the biased one (divided by the
// row length), as PyTorch's layer_norm. Statistics are fp32 for bf16/fp16/fp32
// storage; every operand has its own precision. y may be x, and dx may be dy.
// dweight and dbias are overwritten (not accumulated): they are sums over rows,
// formed deterministically — per-chunk partial sums, then one fixed-order pass
// over the chunks; no atomics. A NaN or inf in a row gives a NaN row (and NaN
// statistics); it reaches dweight and dbias through that row's terms.
//
// Implementation: host in layernorm_host.hpp, CUDA in layernorm_cuda.hpp.
#pragma once

#include "fusor/exec/host.hpp"
#include "fusor/kernels/layernorm_host.hpp"
#include "fusor/kernels/rows.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/layernorm_cuda.hpp"
#endif

namespace fusor {

/// Options of layernorm and rmsnorm.
struct norm_options {
  /// Added to the variance (layernorm) or the mean square (rmsnorm) before the square root.
  float epsilon = 1e-5f;
};

namespace detail {
// Forward operands checked and as rows. Centered: layernorm (mean and bias).
template <bool Centered, class Y, class M, class R, class X, class W, class B>
auto norm_forward_operands(const char* op, const Y& y, const M& mean, const R& rstd, const X& x, const W& weight,
                           const B& bias) {
  require_same_shape(op, "y", y, "x", x);
  norm_forward<typename Y::element_type, typename M::element_type, typename R::element_type,
               typename X::element_type, typename W::element_type, typename B::element_type>
      f{rows_of(y),
                                   Centered ? per_row_of(op, "mean", mean, x) : per_row<typename M::element_type>{},
                                   per_row_of(op, "rstd", rstd, x),
                                   as_input(rows_of(x)),
                                   per_column_of(op, "weight", weight, x),
                                   Centered ? per_column_of(op, "bias", bias, x) : per_column<typename B::element_type>{}};
  return f;
}
template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
auto norm_backward_operands(const char* op, const DX& dx, const DW& dweight, const DB& dbias, const DY& dy,
                            const X& x, const W& weight, const M& mean, const R& rstd) {
  require_same_shape(op, "dx", dx, "x", x);
  require_same_shape(op, "dy", dy, "x", x);
  norm_backward<typename DX::element_type, typename DW::element_type, typename DB::element_type,
                typename DY::element_type, typename X::element_type, typename W::element_type,
                typename M::element_type, typename R::element_type>
      b{
      rows_of(dx),
      per_column_of(op, "dweight", dweight, x),
      Centered ? per_column_of(op, "dbias", dbias, x) : per_column<typename DB::element_type>{},
      as_input(rows_of(dy)),
      as_input(rows_of(x)),
      per_column_of(op, "weight", weight, x),
      Centered ? per_row_of(op, "mean", mean, x) : per_row<typename M::element_type>{},
      per_row_of(op, "rstd", rstd, x)};
  return b;
}
}  // namespace detail

// ---- layernorm -------------------------------------------------------------------------
/// y = (x - mean) * rstd * weight + bias over the last axis of x, saving each row's mean and rstd for the
/// backward; on the host.
template <row_operand Y, row_operand M, row_operand R, row_operand X, row_operand W, row_operand B>
void layernorm(const Y& y, const M& mean, const R& rstd, const X& x, const W& weight, const B& bias,
               const norm_options& options = {}, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Y, M, R, X, W, B>,
                "fusor: layernorm on the host executor needs its operands in host-accessible memory");
  detail::norm_forward_host<true>(detail::norm_forward_operands<true>("layernorm", as_view(y), as_view(mean),
                                                                      as_view(rstd), as_view(x), as_view(weight),
                                                                      as_view(bias)),
                                  options.epsilon, ex);
}
/// The gradients of layernorm: dx, and dweight and dbias overwritten with their sums over rows; on the host.
template <row_operand DX, row_operand DW, row_operand DB, row_operand DY, row_operand X, row_operand W,
          row_operand M, row_operand R>
void layernorm_backward(const DX& dx, const DW& dweight, const DB& dbias, const DY& dy, const X& x, const W& weight,
                        const M& mean, const R& rstd, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<DX, DW, DB, DY, X, W, M, R>,
                "fusor: layernorm_backward on the host executor needs its operands in host-accessible memory");
  detail::norm_backward_host<true>(
      detail::norm_backward_operands<true>("layernorm_backward", as_view(dx), as_view(dweight), as_view(dbias),
                                           as_view(dy), as_view(x), as_view(weight), as_view(mean), as_view(rstd)),
      ex);
}

// ---- rmsnorm ---------------------------------------------------------------------------
/// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + epsilon) per row of the last axis, saving rstd for the
/// backward; on the host.
template <row_operand Y, row_operand R, row_operand X, row_operand W>
void rmsnorm(const Y& y, const R& rstd, const X& x, const W& weight, const norm_options& options = {},
             const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Y, R, X, W>,
                "fusor: rmsnorm on the host executor needs its operands in host-accessible memory");
  const auto& r = as_view(rstd);
  const auto& w = as_view(weight);
  detail::norm_forward_host<false>(
      detail::norm_forward_operands<false>("rmsnorm", as_view(y), r, r, as_view(x), w, w), options.epsilon, ex);
}
/// The gradients of rmsnorm: dx, and dweight overwritten with its sum over rows; on the host.
template <row_operand DX, row_operand DW, row_operand DY, row_operand X, row_operand W, row_operand R>
void rmsnorm_backward(const DX& dx, const DW& dweight, const DY& dy, const X& x, const W& weight, const R& rstd,
                      const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<DX, DW, DY, X, W, R>,
                "fusor: rmsnorm_backward on the host executor needs its operands in host-accessible memory");
  const auto& r = as_view(rstd);
  const auto& dw = as_view(dweight);
  detail::norm_backward_host<false>(detail::norm_backward_operands<false>("rmsnorm_backward", as_view(dx), dw, dw,
                                                                          as_view(dy), as_view(x), as_view(weight),
                                                                          r, r),
                                    ex);
}

#if FUSOR_HAS_CUDA
/// layernorm, queued on the cuda executor's stream.
template <row_operand Y, row_operand M, row_operand R, row_operand X, row_operand W, row_operand B>
void layernorm(const Y& y, const M& mean, const R& rstd, const X& x, const W& weight, const B& bias,
               const norm_options& options, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Y, M, R, X, W, B>,
                "fusor: layernorm on the cuda executor needs its operands in device-accessible memory");
  detail::norm_forward_cuda<true>(detail::norm_forward_operands<true>("layernorm", as_view(y), as_view(mean),
                                                                      as_view(rstd), as_view(x), as_view(weight),
                                                                      as_view(bias)),
                                  options.epsilon, ex);
}
/// layernorm_backward, queued on the cuda executor's stream.
template <row_operand DX, row_operand DW, row_operand DB, row_operand DY, row_operand X, row_operand W,
          row_operand M, row_operand R>
void layernorm_backward(const DX& dx, const DW& dweight, const DB& dbias, const DY& dy, const X& x, const W& weight,
                        const M& mean, const R& rstd, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<DX, DW, DB, DY, X, W, M, R>,
                "fusor: layernorm_backward on the cuda executor needs its operands in device-accessible memory");
  detail::norm_backward_cuda<true>(
      detail::norm_backward_operands<true>("layernorm_backward", as_view(dx), as_view(dweight), as_view(dbias),
                                           as_view(dy), as_view(x), as_view(weight), as_view(mean), as_view(rstd)),
      ex);
}
/// rmsnorm, queued on the cuda executor's stream.
template <row_operand Y, row_operand R, row_operand X, row_operand W>
void rmsnorm(const Y& y, const R& rstd, const X& x, const W& weight, const norm_options& options,
             const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Y, R, X, W>,
                "fusor: rmsnorm on the cuda executor needs its operands in device-accessible memory");
  const auto& r = as_view(rstd);
  const auto& w = as_view(weight);
  detail::norm_forward_cuda<false>(
      detail::norm_forward_operands<false>("rmsnorm", as_view(y), r, r, as_view(x), w, w), options.epsilon, ex);
}
/// rmsnorm_backward, queued on the cuda executor's stream.
template <row_operand DX, row_operand DW, row_operand DY, row_operand X, row_operand W, row_operand R>
void rmsnorm_backward(const DX& dx, const DW& dweight, const DY& dy, const X& x, const W& weight, const R& rstd,
                      const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<DX, DW, DY, X, W, R>,
                "fusor: rmsnorm_backward on the cuda executor needs its operands in device-accessible memory");
  const auto& r = as_view(rstd);
  const auto& dw = as_view(dweight);
  detail::norm_backward_cuda<false>(detail::norm_backward_operands<false>("rmsnorm_backward", as_view(dx), dw, dw,
                                                                          as_view(dy), as_view(x), as_view(weight),
                                                                          r, r),
                                    ex);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor
