// fusor/nn/loss.hpp — the softmax cross-entropy loss of a classifier, with the
// gradient of its logits in the same pass (kernels/cross_entropy.hpp), and the
// running sums an epoch report needs, kept where the network runs: nothing
// here waits for the device until the caller asks for a number.
//
//   nn::softmax_cross_entropy<Space> loss(max_batch, {}, stream);     // {}: cross_entropy_options
//   loss.forward_backward(logits, labels, net.output_gradient(), ex);  // dlogits of the mean loss
//   loss.evaluate(logits, labels, ex);              // loss and correct predictions only
//   loss.totals() -> {mean loss, accuracy, samples} since reset()       // one wait
//
// Labels are int32 class indices; ignore_index (-100) rows count nowhere; a
// label outside the classes makes its row's loss NaN and is counted in
// totals().labels_outside (check_labels_inside() throws for it).
// A language model's logits [batch, time, vocabulary] (any leading axes) are
// rows of the last axis, with labels [batch, time]: max_rows counts rows
// (batch x time), the mean is over every row not ignored, and "accuracy" is
// the fraction of next tokens predicted.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/cross_entropy.hpp"
#include "fusor/kernels/reduce.hpp"

/// The message of labels that are not integers (one string literal, for static_assert).
#define FUSOR_INTEGER_LABELS_MESSAGE                                                                              \
  "fusor: labels are class indices, integers: store them as std::int32_t (e.g. fusor::tensor<std::int32_t, ...>), " \
  "not as floating point"

namespace fusor::nn {

namespace detail {
// Whether Labels (a view or a tensor) holds integers, as class indices must be.
template <class Labels>
inline constexpr bool integer_labels_v =
    std::is_integral_v<typename std::remove_cvref_t<decltype(as_view(std::declval<const Labels&>()))>::element_type>;
}  // namespace detail

/// Running totals of a softmax_cross_entropy since its last reset(), as returned by totals().
struct loss_totals {
  double mean_loss = 0;  ///< over the samples seen since reset()
  double accuracy = 0;   ///< fraction of them whose largest logit is the label
  /// Rows counted since reset() (rows whose label is ignore_index excluded)
  index_t samples = 0;
  /// Of them, rows whose label lies outside the classes [0, V): their loss is NaN, and so is mean_loss.
  /// check_labels_inside() turns them into an error; app::fit and app::evaluate call it.
  index_t labels_outside = 0;
};

/// Throws fusor::error if `totals` counted a label outside the classes, naming `what` (the data, e.g.
/// "the validation set") and how many: a mean loss of NaN then says nothing about the network.
inline void check_labels_inside(const loss_totals& totals, const std::string& what) {
  if (totals.labels_outside == 0) return;
  throw error(what + ": " + std::to_string(totals.labels_outside) + " of " + std::to_string(totals.samples) +
              " labels lie outside the classes [0, V) of the logits and are not the ignore index, which makes "
              "their loss NaN: check the labels' values and the network's number of outputs");
}

/// Softmax cross-entropy loss of a classifier over logit rows, with the logits' gradient in the same pass and
/// running loss/accuracy totals kept in Space (nothing waits for the device until totals()).
template <class Space = host_space>
class softmax_cross_entropy {
  using scalar = tensor<double, extents<index_t>, row_major, Space>;
  using per_sample_loss = tensor<double, dextents<index_t, 1>, row_major, Space>;
  using per_sample_int = tensor<std::int32_t, dextents<index_t, 1>, row_major, Space>;

 public:
  /// Allocates buffers in Space (on `stream`) for batches of up to `max_rows` rows and zeroes the totals.
  explicit softmax_cross_entropy(index_t max_rows, cross_entropy_options options = {}, stream_t stream = {})
      : options_(options),
        losses_(dextents<index_t, 1>(max_rows), stream),
        predictions_(dextents<index_t, 1>(max_rows), stream),
        batch_loss_(extents<index_t>{}, stream),
        loss_sum_(extents<index_t>{}, stream),
        correct_sum_(extents<index_t>{}, stream),
        sample_sum_(extents<index_t>{}, stream),
        outside_sum_(extents<index_t>{}, stream),
        batch_correct_(extents<index_t>{}, stream),
        batch_rows_(extents<index_t>{}, stream),
        batch_outside_(extents<index_t>{}, stream) {
    reset_host_side();
  }

  /// Per-sample losses, the batch's mean loss (loss()), the running totals, and
  /// dlogits = d(mean loss)/d(logits) * options.grad_scale.
  /// dlogits may be logits (in place: the logits are then stored once).
  /// Throws shape_error for more rows than max_rows or labels that do not match the logits' rows.
  template <class Logits, class Labels, class Gradient, class Executor>
  void forward_backward(const Logits& logits, const Labels& labels, const Gradient& dlogits, const Executor& ex) {
    static_assert(detail::integer_labels_v<Labels>, FUSOR_INTEGER_LABELS_MESSAGE);
    // After a failed check, nothing deeper is instantiated: one error, not a cascade.
    if constexpr (detail::integer_labels_v<Labels>) {
      const auto rows = as_rows(logits);
      rows_pass<true>(normalized(rows), normalized(as_targets(labels, logits, rows)), normalized(as_rows(dlogits)),
                      ex);
    }
  }
  /// The same as forward_backward() without the gradient (evaluation).
  template <class Logits, class Labels, class Executor>
  void evaluate(const Logits& logits, const Labels& labels, const Executor& ex) {
    static_assert(detail::integer_labels_v<Labels>, FUSOR_INTEGER_LABELS_MESSAGE);
    if constexpr (detail::integer_labels_v<Labels>) {
      const auto rows = as_rows(logits);
      const auto logit_rows = normalized(rows);
      rows_pass<false>(logit_rows, normalized(as_targets(labels, logits, rows)), logit_rows, ex);
    }
  }

  /// The last batch's mean loss, a one-element view in Space (for a loss scaler or a log).
  view<double, extents<index_t>, row_major, Space> loss() const { return batch_loss_.view(); }

  /// Zeroes the running totals (in stream order).
  template <class Executor>
  void reset(const Executor& ex);
  /// Copies the totals to the host (waits for them).
  loss_totals totals() const {
    double host[4];
    copy(view<double, extents<index_t>>(host + 0), loss_sum_.view());
    copy(view<double, extents<index_t>>(host + 1), correct_sum_.view());
    copy(view<double, extents<index_t>>(host + 2), sample_sum_.view());
    copy(view<double, extents<index_t>>(host + 3), outside_sum_.view());
    const index_t n = static_cast<index_t>(host[2]);
    return {n ? host[0] / host[2] : 0.0, n ? host[1] / host[2] : 0.0, n, static_cast<index_t>(host[3])};
  }
  /// The options (ignore_index, reduction, grad_scale) the loss was built with.
  const cross_entropy_options& options() const { return options_; }

 private:
  // The work of forward_backward (WithGradient; the gradient into `dlogits`) and of evaluate (`dlogits`
  // unused) on views that normalized() made: every network whose logits have one element type shares one
  // instance. fusor::cuda_runtime and fusor::runtime compile the common ones (see the end of this file).
  // Defined outside the class, so not inline: an `extern template` of it then keeps compilers from instantiating it.
  template <bool WithGradient, class Logits, class Targets, class Gradient, class Executor>
  void rows_pass(const Logits& logits, const Targets& targets, const Gradient& dlogits, const Executor& ex);

  void reset_host_side() {
    const double zero = 0;
    for (auto* t : {&loss_sum_, &correct_sum_, &sample_sum_, &outside_sum_, &batch_loss_})
      copy(t->view(), view<double, extents<index_t>>(const_cast<double*>(&zero)));
  }
  // [rows, classes]: a 2-D view as it is; more axes (a sequence) are flattened
  // into rows, which needs a contiguous row-major view.
  template <class Logits>
  static auto as_rows(const Logits& logits) {
    const auto& v = as_view(logits);
    using V = std::remove_cvref_t<decltype(v)>;
    static_assert(V::rank >= 2,
                  "fusor: nn::softmax_cross_entropy: logits are [rows, classes] or [batch, ..., classes]");
    if constexpr (V::rank == 2) {
      return v;
    } else {
      if (!v.is_contiguous() || !std::is_same_v<typename V::layout_type, row_major>)
        throw shape_error("fusor::nn::softmax_cross_entropy: logits of shape " + shape_string(v.extents()) +
                          " with more than two axes must be contiguous and row-major");
      const index_t classes = v.extent(V::rank - 1);
      return view<typename V::precision, dextents<index_t, 2>, row_major, typename V::space>(
          v.data(), classes ? v.size() / classes : 0, classes);
    }
  }
  // Labels with one value per row of `rows` (the logits, flattened to [rows, classes]): the logits' leading shape
  // ([batch, positions] for [batch, positions, classes]), or [rows]. Errors name the logits as given.
  template <class Labels, class Logits, class Rows>
  static auto as_targets(const Labels& labels, const Logits& logits, const Rows& rows) {
    const auto& v = as_view(labels);
    using V = std::remove_cvref_t<decltype(v)>;
    constexpr std::size_t logits_rank = std::remove_cvref_t<decltype(as_view(logits))>::rank;
    if constexpr (V::rank == 1 && logits_rank == 2) {
      return v;  // cross_entropy checks them, naming both shapes
    } else {
      const bool contiguous = v.is_contiguous() && std::is_same_v<typename V::layout_type, row_major>;
      if (v.size() != rows.extent(0) || !contiguous) {
        const auto& lv = as_view(logits);
        std::string leading = "[";
        for (std::size_t k = 0; k + 1 < logits_rank; ++k) leading += (k ? ", " : "") + std::to_string(lv.extent(k));
        throw shape_error("fusor::nn::softmax_cross_entropy: labels of shape " + shape_string(v.extents()) +
                          " for logits of shape " + shape_string(lv.extents()) + ": one label per row of logits, " +
                          "shape " + leading + "] (or [" + std::to_string(rows.extent(0)) + "], flattened)" +
                          (contiguous ? "" : ", contiguous and row-major"));
      }
      return view<typename V::precision, dextents<index_t, 1>, row_major, typename V::space>(v.data(), rows.extent(0));
    }
  }
  // A row-major view as a view of its element type with dynamic extents (the
  // same memory): one type for every shape and for a precision policy and
  // its element type alike (bf16 and __nv_bfloat16). Other layouts stay as they are.
  template <class V>
  static auto normalized(const V& v) {
    if constexpr (std::is_same_v<typename V::layout_type, row_major>) {
      using result = view<typename V::element_type, dextents<index_t, V::rank>, row_major, typename V::space>;
      return result(v.data(), typename result::mapping_type(v.mapping()));
    } else {
      return v;
    }
  }
  template <class Rows>
  view<double, dextents<index_t, 1>, row_major, Space> losses(const Rows& logits) const {
    const index_t rows = logits.extent(0);
    if (rows > losses_.extent(0))
      throw shape_error("fusor::nn::softmax_cross_entropy: a batch of " + std::to_string(rows) +
                        " rows for a loss built for at most " + std::to_string(losses_.extent(0)));
    return {losses_.data(), rows};
  }
  template <class Rows, class Executor>
  void predict(const Rows& logits, const Executor& ex) {
    const view<std::int32_t, dextents<index_t, 1>, row_major, Space> predicted(predictions_.data(), logits.extent(0));
    argmax(predicted, logits, 1, ex);
  }
  // Adds the batch to the running totals: three sums and one fused update, for the mean and the sum reduction.
  template <class Targets, class Executor>
  void accumulate(const Targets& lv, const view<double, dextents<index_t, 1>, row_major, Space>& l, index_t classes,
                  const Executor& ex) {
    const view<std::int32_t, dextents<index_t, 1>, row_major, Space> predicted(predictions_.data(), l.extent(0));
    cross_entropy_reduce(batch_loss_.view(), l, lv, options_, ex);
    // Rows with ignore_index count nowhere; a row whose label is outside the classes counts (its loss is NaN)
    // and is noted, so that totals() can say why the mean is NaN.
    const auto counted = lv != options_.ignore_index;
    sum(batch_correct_.view(), cast<double>(counted && predicted == lv), ex);
    sum(batch_rows_.view(), cast<double>(counted), ex);
    sum(batch_outside_.view(), cast<double>(counted && (lv < 0 || lv >= classes)), ex);
    const auto rows = batch_rows_.view();
    const auto add = [&](const auto& batch_total_loss) {
      assign_many(ex, out(loss_sum_.view(), loss_sum_.view() + batch_total_loss),
                  out(correct_sum_.view(), correct_sum_.view() + batch_correct_.view()),
                  out(sample_sum_.view(), sample_sum_.view() + rows),
                  out(outside_sum_.view(), outside_sum_.view() + batch_outside_.view()));
    };
    // The batch's total loss: its mean times the rows counted, or its sum; nothing for a batch of ignored rows
    // only, whose mean (0 / 0) is NaN and would make every later total NaN.
    if (options_.reduction == loss_reduction::mean) add(where(rows > 0, batch_loss_.view() * rows, 0.0));
    else add(batch_loss_.view());
  }

  cross_entropy_options options_;
  per_sample_loss losses_;
  per_sample_int predictions_;
  scalar batch_loss_, loss_sum_, correct_sum_, sample_sum_, outside_sum_;
  scalar batch_correct_, batch_rows_, batch_outside_;  // this batch's sums, added to the totals
};

template <class Space>
template <class Executor>
void softmax_cross_entropy<Space>::reset(const Executor& ex) {
  assign_many(ex, out(loss_sum_.view(), 0.0), out(correct_sum_.view(), 0.0), out(sample_sum_.view(), 0.0),
              out(outside_sum_.view(), 0.0));
}
template <class Space>
template <bool WithGradient, class Logits, class Targets, class Gradient, class Executor>
void softmax_cross_entropy<Space>::rows_pass(const Logits& logits, const Targets& targets, const Gradient& dlogits,
                                             const Executor& ex) {
  const auto l = losses(logits);
  predict(logits, ex);  // first: an in-place gradient overwrites the logits
  if constexpr (WithGradient) cross_entropy(l, dlogits, logits, targets, options_, ex);
  else cross_entropy_loss(l, logits, targets, options_, ex);
  accumulate(targets, l, logits.extent(1), ex);
}

// The instances most programs use -- logits of fp32 or bf16 elements in one
// row-major batch, int32 labels (what normalized() makes of them) -- compiled
// once: the host's in fusor::runtime (src/nn.cpp), the GPU's in
// fusor::cuda_runtime (src/cuda/nn.cu). PREFIX is `extern` for the
// declarations here and empty for the definitions there.
#define FUSOR_LOSS_ROWS_PASS(PREFIX, Space, Executor, Element)                                               \
  PREFIX template void softmax_cross_entropy<Space>::rows_pass<true>(                                          \
      const view<Element, dextents<index_t, 2>, row_major, Space>&,                                            \
      const view<std::int32_t, dextents<index_t, 1>, row_major, Space>&,                                       \
      const view<Element, dextents<index_t, 2>, row_major, Space>&, const Executor&);                          \
  PREFIX template void softmax_cross_entropy<Space>::rows_pass<false>(                                         \
      const view<Element, dextents<index_t, 2>, row_major, Space>&,                                            \
      const view<std::int32_t, dextents<index_t, 1>, row_major, Space>&,                                       \
      const view<Element, dextents<index_t, 2>, row_major, Space>&, const Executor&)
#define FUSOR_LOSS_HOST_INSTANCES(PREFIX)                                                                     \
  FUSOR_LOSS_ROWS_PASS(PREFIX, host_space, host_executor, float);                                             \
  PREFIX template void softmax_cross_entropy<host_space>::reset<host_executor>(const host_executor&)
#define FUSOR_LOSS_CUDA_INSTANCES(PREFIX)                                                                     \
  FUSOR_LOSS_ROWS_PASS(PREFIX, device_space, cuda_executor, float);                                           \
  FUSOR_LOSS_ROWS_PASS(PREFIX, device_space, cuda_executor, __nv_bfloat16);                                   \
  PREFIX template void softmax_cross_entropy<device_space>::reset<cuda_executor>(const cuda_executor&)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_LOSS_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_LOSS_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::nn
