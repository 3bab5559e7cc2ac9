// fusor/kernels/cross_entropy.hpp — softmax cross-entropy fused with its
// gradient, as llm.c's fused classifier: one pass over the logits gives each
// row's loss and the gradient of the logits, under the host and cuda executors.
//
//   cross_entropy(losses, dlogits, logits, targets, options, ex);
//       losses[r]     = logsumexp(logits[r]) - logits[r, targets[r]]
//       dlogits[r, j] = (softmax(logits[r])[j] - (j == targets[r])) * scale
//   cross_entropy_loss(losses, logits, targets, options, ex);    losses only (evaluation)
//   cross_entropy_reduce(loss, losses, targets, options, ex);    the mean (or sum) of losses
//
// logits are rows along the last axis ([N, V], or any leading shape); targets
// and losses have one value per row ([N] or the leading shape); targets are
// integers in [0, V). `scale` is options.grad_scale / (number of rows whose
// target is not ignore_index) for loss_reduction::mean — the gradient of
// PyTorch's mean cross-entropy — or options.grad_scale for loss_reduction::sum;
// grad_scale is the upstream gradient of the reduced loss (1, or a loss scale).
//
// ignore_index (default -100, as PyTorch): such a row is not read at all; its
// loss is 0 and its gradient row 0, and it does not count in the mean. A row
// holding a NaN logit, or +inf, or only -inf, has a NaN loss and a NaN
// gradient row; a target outside [0, V) (other than ignore_index) gives a NaN
// loss and a NaN gradient row too — never a silent number. The reduced loss of
// a batch whose rows are all ignored is NaN (0 / 0), as in PyTorch.
//
// dlogits may be logits (in place, as llm.c does). Statistics are fp32 for
// bf16/fp16/fp32 logits. On the GPU: a warp or a block per row (see
// softmax.hpp for the sizes); a contiguous row that fits in registers is read
// once. Launches: one, plus one that counts the rows for loss_reduction::mean.
// cross_entropy_reduce is one single-block launch, deterministic.
#pragma once

#include <cmath>
#include <limits>
#include <utility>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/exec/host.hpp"
#include "fusor/kernels/rows.hpp"
#include "fusor/kernels/rows_host.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/kernels/cross_entropy_cuda.hpp"
#endif

namespace fusor {

/// How row losses combine into one loss, and so how the gradient is scaled.
/// `mean`: over the rows whose target is not ignore_index; `sum`: over all rows.
enum class loss_reduction { mean, sum };

/// Options of cross_entropy, cross_entropy_loss and cross_entropy_reduce.
struct cross_entropy_options {
  index_t ignore_index = -100;  ///< A row with this target is not read: loss 0, gradient 0, not counted in the mean.
  loss_reduction reduction = loss_reduction::mean;  ///< Mean or sum of the row losses.
  float grad_scale = 1.0f;  ///< The upstream gradient of the reduced loss (1, or a loss scale).
};

namespace detail {

template <class T>
index_t counted_rows(const per_row<T>& targets, index_t rows, index_t ignore_index) {
  index_t count = 0;
  for (index_t r = 0; r < rows; ++r) count += index_t(targets[r]) != ignore_index;
  return count;
}

// One row whose target is not ignored; returns its loss. A plain function of
// pointers and strides so the loops vectorise (see softmax.hpp).
template <bool WithGradient, class S, class G, class X, class SG, class SX>
S cross_entropy_row_host(G* grad, const X* in, index_t n, SG sg, SX sx, index_t target, S scale, S* e) {
  const bool valid = target >= 0 && target < n;
  S m = -::cuda::std::numeric_limits<S>::infinity();
  FUSOR_OMP_SIMD(reduction(max : m))
  for (index_t j = 0; j < n; ++j) {
    const S v = convert<S>(in[j * sx]);
    m = v > m ? v : m;
  }
  const S s = row_sum<S>(n, [=](index_t j) {
    const S v = host_exp(convert<S>(in[j * sx]) - m);
    if constexpr (WithGradient) e[j] = v;
    return v;
  });
  const S nan = ::cuda::std::numeric_limits<S>::quiet_NaN();
  const S loss = valid ? m + ::cuda::std::log(s) - convert<S>(in[target * sx]) : nan;
  if constexpr (WithGradient) {
    const S factor = valid ? scale / s : nan;
    FUSOR_OMP_SIMD()
    for (index_t j = 0; j < n; ++j) grad[j * sg] = convert<G>(e[j] * factor - (j == target ? scale : S(0)));
  }
  return loss;
}

template <bool WithGradient, class G, class L, class X, class T>
void cross_entropy_host(const row_matrix<G>& dlogits, const per_row<L>& losses, const row_matrix<const X>& logits,
                        const per_row<T>& targets, const cross_entropy_options& options, const host_executor& ex) {
  using S = statistic_t<X>;
  const index_t n = logits.length;
  const S scale = options.reduction == loss_reduction::mean
                      ? S(options.grad_scale) / S(counted_rows(targets, logits.rows, options.ignore_index))
                      : S(options.grad_scale);
  for_each_row<S>(ex, logits.rows, n, WithGradient ? n : 0, [&](index_t r, S* scratch) {
    const index_t target = index_t(targets[r]);
    if (target == options.ignore_index) {  // not read: zero loss, zero gradient
      losses[r] = convert<L>(0.0f);
      if constexpr (WithGradient) {
        G* grad = dlogits.row(r);
        for (index_t j = 0; j < n; ++j) grad[j * dlogits.column_stride] = convert<G>(0.0f);
      }
      return;
    }
    with_unit_strides(
        [&](auto sg, auto sx) {
          losses[r] = convert<L>(cross_entropy_row_host<WithGradient>(WithGradient ? dlogits.row(r) : nullptr,
                                                                      logits.row(r), n, sg, sx, target, scale,
                                                                      scratch));
        },
        WithGradient ? dlogits.column_stride : 1, logits.column_stride);
  });
}

#if defined(FUSOR_SEPARATE_COMPILATION)
// fp32 logits, double losses, int targets (nn::softmax_cross_entropy's): compiled in fusor_runtime (src/kernels.cpp).
extern template void cross_entropy_host<true>(const row_matrix<float>&, const per_row<double>&,
                                              const row_matrix<const float>&, const per_row<int>&,
                                              const cross_entropy_options&, const host_executor&);
extern template void cross_entropy_host<false>(const row_matrix<float>&, const per_row<double>&,
                                               const row_matrix<const float>&, const per_row<int>&,
                                               const cross_entropy_options&, const host_executor&);
#endif

template <class L, class T>
void cross_entropy_reduce_host(L* loss, const per_row<const L>& losses, const per_row<T>& targets, index_t rows,
                               const cross_entropy_options& options) {
  using S = statistic_t<L>;
  S total = 0;
  for (index_t r = 0; r < rows; ++r) total += convert<S>(losses[r]);
  if (options.reduction == loss_reduction::mean) total /= S(counted_rows(targets, rows, options.ignore_index));
  *loss = convert<L>(total);
}

// Shapes checked, operands as rows.
template <class G, class L, class X, class T>
auto cross_entropy_operands(const char* op, const G& dlogits, const L& losses, const X& logits, const T& targets) {
  static_assert(std::is_integral_v<typename T::element_type>, "fusor: cross-entropy targets must be integers");
  require_same_shape(op, "dlogits", dlogits, "logits", logits);
  return std::tuple{rows_of(dlogits), per_row_of(op, "losses", losses, logits), as_input(rows_of(logits)),
                    per_row_of(op, "targets", targets, logits)};
}
template <class Loss, class L, class T>
auto cross_entropy_reduce_operands(const Loss& loss, const L& losses, const T& targets) {
  static_assert(std::is_integral_v<typename T::element_type>, "fusor: cross-entropy targets must be integers");
  static_assert(std::is_same_v<typename Loss::element_type, typename L::element_type>,
                "fusor: cross_entropy_reduce stores the loss in the losses' precision");
  if (loss.size() != 1)
    throw shape_error("fusor: cross_entropy_reduce: loss has shape " + shape_string(loss.extents()) +
                      " but it must hold exactly one value");
  require_same_shape("cross_entropy_reduce", "losses", losses, "targets", targets);
  const index_t rows = losses.size();
  return std::tuple{loss.data(), per_row<const typename L::element_type>{losses.data(), make_row_offsets(losses, L::rank)},
                    per_row<typename T::element_type>{targets.data(), make_row_offsets(targets, T::rank)}, rows};
}

}  // namespace detail

/// Each row's loss, logsumexp(logits[r]) - logits[r, targets[r]], and the gradient of the logits, in one pass
/// on the host; dlogits may be logits.
template <row_operand L, row_operand G, row_operand X, row_operand T>
void cross_entropy(const L& losses, const G& dlogits, const X& logits, const T& targets,
                   const cross_entropy_options& options = {}, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<G, L, X, T>,
                "fusor: cross_entropy on the host executor needs its operands in host-accessible memory");
  const auto [g, l, x, t] =
      detail::cross_entropy_operands("cross_entropy", as_view(dlogits), as_view(losses), as_view(logits), as_view(targets));
  detail::cross_entropy_host<true>(g, l, x, t, options, ex);
}
/// Each row's loss only, without the gradient (evaluation), on the host.
template <row_operand L, row_operand X, row_operand T>
void cross_entropy_loss(const L& losses, const X& logits, const T& targets, const cross_entropy_options& options = {},
                        const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<L, X, T>,
                "fusor: cross_entropy_loss on the host executor needs its operands in host-accessible memory");
  const auto [g, l, x, t] = detail::cross_entropy_operands("cross_entropy_loss", as_view(logits), as_view(losses),
                                                           as_view(logits), as_view(targets));
  detail::cross_entropy_host<false>(g, l, x, t, options, ex);
}
/// `loss` (one value) = the mean of `losses` over rows whose target is not ignored, or their sum, as
/// options.reduction says; on the host.
template <row_operand Loss, row_operand L, row_operand T>
void cross_entropy_reduce(const Loss& loss, const L& losses, const T& targets, const cross_entropy_options& options = {},
                          const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Loss, L, T>,
                "fusor: cross_entropy_reduce on the host executor needs its operands in host-accessible memory");
  const auto [out, l, t, rows] = detail::cross_entropy_reduce_operands(as_view(loss), as_view(losses), as_view(targets));
  detail::cross_entropy_reduce_host(out, l, t, rows, options);
  (void)ex;
}

#if FUSOR_HAS_CUDA
/// cross_entropy, queued on the cuda executor's stream.
template <row_operand L, row_operand G, row_operand X, row_operand T>
void cross_entropy(const L& losses, const G& dlogits, const X& logits, const T& targets,
                   const cross_entropy_options& options, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<G, L, X, T>,
                "fusor: cross_entropy on the cuda executor needs its operands in device-accessible memory");
  const auto [g, l, x, t] =
      detail::cross_entropy_operands("cross_entropy", as_view(dlogits), as_view(losses), as_view(logits), as_view(targets));
  detail::cross_entropy_cuda<true>(g, l, x, t, options.ignore_index, options.reduction == loss_reduction::mean,
                                   options.grad_scale, ex);
}
/// cross_entropy_loss, queued on the cuda executor's stream.
template <row_operand L, row_operand X, row_operand T>
void cross_entropy_loss(const L& losses, const X& logits, const T& targets, const cross_entropy_options& options,
                        const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<L, X, T>,
                "fusor: cross_entropy_loss on the cuda executor needs its operands in device-accessible memory");
  const auto [g, l, x, t] = detail::cross_entropy_operands("cross_entropy_loss", as_view(logits), as_view(losses),
                                                           as_view(logits), as_view(targets));
  detail::cross_entropy_cuda<false>(g, l, x, t, options.ignore_index, false, options.grad_scale, ex);
}
/// cross_entropy_reduce, queued on the cuda executor's stream (one single-block launch, deterministic).
template <row_operand Loss, row_operand L, row_operand T>
void cross_entropy_reduce(const Loss& loss, const L& losses, const T& targets, const cross_entropy_options& options,
                          const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Loss, L, T>,
                "fusor: cross_entropy_reduce on the cuda executor needs its operands in device-accessible memory");
  const auto [out, l, t, rows] = detail::cross_entropy_reduce_operands(as_view(loss), as_view(losses), as_view(targets));
  detail::cross_entropy_reduce_cuda(out, l, t, rows, options.ignore_index, options.reduction == loss_reduction::mean,
                                    ex);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor
