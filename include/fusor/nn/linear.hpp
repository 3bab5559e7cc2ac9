// fusor/nn/linear.hpp — a fully connected layer, y = activation(x w^T + b), with
// the bias and the activation fused into the matmul's epilogue (cuBLASLt on
// the GPU, OpenBLAS + one fused pass on the host).
//
//   nn::linear<784, 256, nn::relu>      // w: [256, 784] (PyTorch's layout), b: [256]
//   nn::linear<256, 10>                 // no activation
//
// Per token: features<Lead..., In> in, features<Lead..., Out> out, as
// PyTorch's Linear on [batch, time, channels]. Every leading feature axis is a
// row of the one matmul (rows = batch * product of Lead), so a GPT's
// projections are nn::linear<C, 3 * C> on features<T, C>.
//
// Activations: nn::identity, nn::relu and nn::gelu_tanh ride in the epilogue;
// any other elementwise function (nn::elementwise<F>, including a user's) is
// one more fused pass, and its backward the compile-time derivative.
// Backward: dy is masked by the activation's derivative in place (one pass,
// none for identity), then dw = dy^T x with db fused into the same matmul (on
// the GPU, summed by one more kernel where cuBLASLt has no algorithm with the
// bias-gradient epilogue: kernels/matmul_bias_gradient.hpp), and dx = dy w. Initialisation as PyTorch: U(+-1/sqrt(in)) for w and b.
//
// Tensor parallelism (nn/sharding.hpp), Megatron's scheme, by the parallel policy:
//   nn::parallel<nn::column_parallel<W>>: w [Out/W, In], b [Out/W]; takes the whole
//     features<..., In>, gives this rank's slice features<..., Out/W>. Forward needs no
//     communication; backward sums the partial dx over the ranks (one all-reduce,
//     only when dx is wanted).
//   nn::parallel<nn::column_parallel<W, P>>: the output is P equal parts, each split
//     W ways; this rank's slice is its slice of every part, part after part (a GPT's
//     qkv projection, nn::linear<C, 3 * C> with P = 3: [its q heads | its k heads |
//     its v heads], what nn::causal_attention<H / W, D> takes). w [P, Out/(P*W), In]
//     and b [P, Out/(P*W)] (on more than one rank), the same matmul as P = 1.
//   nn::parallel<nn::row_parallel<W>>: w [Out, In/W], b [Out] (whole, the same on
//     every rank); takes the slice features<..., In/W>, gives the whole features<..., Out>:
//     the partial products are summed over the ranks (one all-reduce), rank 0
//     alone adding the bias, and the activation follows the sum. Backward needs
//     no communication.
// So column -> row is one all-reduce forward and one backward. A split layer is
// connected to its group by fusor::parallel::tensor_parallel; its parameters are
// the slices of the unsplit layer's (network::initialize draws them so).
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/strided_views.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/derivative.hpp"
#include "fusor/expr/substitute.hpp"
#include "fusor/kernels/matmul.hpp"
#include "fusor/nn/activation.hpp"
#include "fusor/nn/layer.hpp"
#include "fusor/nn/linear_kernels.hpp"
#include "fusor/nn/sharding.hpp"

namespace fusor::nn {

namespace detail {
// features<Lead..., Last> with its last extent replaced by N.
template <class F, std::size_t N, class Lead = std::make_index_sequence<F::rank - 1>>
struct features_with_last;
template <class F, std::size_t N, std::size_t... I>
struct features_with_last<F, N, std::index_sequence<I...>> {
  using type = features<feature_extent<I>(F{})..., N>;
};
// linear's parameter specs (instance::parameters), one function for every size: weight [local_out, local_in] and
// bias [local_out], U(+-1/sqrt(in)); a column-parallel layer's specs say which rows of the unsplit layer's they
// are (`parts` interleaved parts), a row-parallel layer's weight which columns.
FUSOR_DECL std::vector<parameter_spec> linear_parameters(std::size_t in, std::size_t out, std::size_t local_in,
                                                         std::size_t local_out, bool column, bool row, int ways,
                                                         int parts);
// Whether F is features<..., N>: what a per-token layer of input width N takes.
template <class F, std::size_t N>
inline constexpr bool last_feature_is = [] {
  if constexpr (is_features_v<F>) return feature_extent<F::rank - 1>(F{}) == N;
  else return false;
}();
}  // namespace detail

/// A fully connected layer, `y = Activation(x w^T + b)` per token over the last feature axis, as PyTorch's Linear, with
/// the bias and the activation fused into the matmul's epilogue where it can.
///
/// w [Out, In] and b [Out], initialised `U(+-1/sqrt(In))` as PyTorch. Policies: a precision, and
/// `nn::parallel<nn::column_parallel<W, P>>` or `nn::parallel<nn::row_parallel<W>>` to split it across W ranks
/// (Megatron's tensor parallelism, nn/sharding.hpp).
template <std::size_t In, std::size_t Out, class Activation = identity, class... Policies>
struct linear {
  static_assert(In > 0 && Out > 0, "fusor: nn::linear needs positive sizes");
  static_assert(is_activation_v<Activation>,
                "fusor: nn::linear's third argument is an activation: nn::identity, nn::relu, nn::gelu_tanh or "
                "nn::elementwise<F>");
  /// The layer's policies, resolved (nn/policies.hpp).
  using policies = layer_policies<row_major, Policies...>;
  /// The parallel strategy: no_parallel, `column_parallel<W, P>` or `row_parallel<W>`.
  using strategy = typename policies::parallel;
  static_assert(std::is_same_v<strategy, no_parallel> || is_tensor_parallel_v<strategy>,
                "fusor: nn::linear's parallel strategy is nn::column_parallel<Ways, Parts> or nn::row_parallel<Ways>");

  /// Whether the output width is split across ranks (column_parallel).
  static constexpr bool column = is_column_parallel_v<strategy>;
  /// Whether the input width is split across ranks (row_parallel).
  static constexpr bool row = is_row_parallel_v<strategy>;
  /// Whether the layer is split across ranks at all.
  static constexpr bool sharded = column || row;
  /// How many ranks the layer is split over (1: not split).
  static constexpr int ways = parallel_ways_v<strategy>;
  /// Interleaved parts of the output, each split `ways` ways: P of `column_parallel<W, P>`, else 1.
  static constexpr int parts = parallel_parts_v<strategy>;  // column_parallel<W, P>: P interleaved parts
  /// The width split across ranks. Column-parallel splits the output width, row-parallel the input width.
  static constexpr std::size_t split_width = column ? Out : In;
  /// The layer's rule beyond its input size (nn/layer.hpp), whatever comes in: the degree divides the width it
  /// splits, and for column_parallel<W, P> P * W divides the output width (checked after the first, one error).
  template <class F>
  using input_rule = std::conditional_t<
      split_width % ways != 0, tensor_parallel_degree_must_divide_width<split_width, ways, false>,
      std::conditional_t<parts == 1 || Out % (std::size_t(parts) * std::size_t(ways)) == 0, no_input_rule,
                         column_parallel_parts_times_ways_must_divide_width<Out, parts, ways, false>>>;
  /// This rank's input width, In / ways for row_parallel (at least 1, so a bad degree reports only the error above).
  static constexpr std::size_t local_in = row ? std::max<std::size_t>(In / ways, 1) : In;
  /// This rank's output width, Out / ways for column_parallel (at least 1, so a bad degree reports only the error
  /// above).
  static constexpr std::size_t local_out = column ? std::max<std::size_t>(Out / ways, 1) : Out;

  /// Any features whose last extent is this rank's input width; the leading ones pass through.
  template <class F>
  static constexpr bool accepts = detail::last_feature_is<F, local_in>;
  /// Named in mismatch errors; any `features<..., local_in>` is accepted.
  using expected_input = features<local_in>;  // or any features<..., local_in>
  /// The input features with the last extent replaced by local_out.
  template <class F>
  using output = typename detail::features_with_last<F, local_out>::type;

  /// `"nn::linear<784, 512> (column_parallel<2>)"`, for errors.
  static std::string name() {
    std::string n = "nn::linear<" + std::to_string(In) + ", " + std::to_string(Out) + ">";
    if constexpr (sharded)
      n += std::string(column ? " (column_parallel<" : " (row_parallel<") + std::to_string(ways) +
           (parts > 1 ? ", " + std::to_string(parts) : std::string()) + ">)";
    return n;
  }

  /// The layer given input features F, the network's precision and a memory Space: views of its weight and bias, the
  /// pre-activation where backward needs it, and for a split layer its group connection.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of x, y and the parameters: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type `precision` stores.
    using element = storage_t<precision>;
    /// F, the input features.
    using input_features = F;
    /// F with its last extent replaced by local_out.
    using output_features = output<F>;
    /// Rows of the matmul per sample: the product of the leading feature extents.
    static constexpr index_t rows_per_sample = F::size / index_t(local_in);
    /// This rank's weight, [local_out, local_in] (PyTorch's layout).
    using weight_view = view<precision, extents<index_t, local_out, local_in>, row_major, Space>;
    /// This rank's bias, [local_out].
    using bias_view = view<precision, extents<index_t, local_out>, row_major, Space>;
    /// Whether the activation is nn::relu.
    static constexpr bool is_relu = std::is_same_v<Activation, relu>;
    /// Whether the activation is nn::identity: none.
    static constexpr bool plain = std::is_same_v<Activation, identity>;
    /// Whether relu rides in the matmul's epilogue.
    ///
    /// After a row-parallel matmul the activation waits for the sum: no fused epilogue.
    static constexpr bool fused_relu = is_relu && !row;
    /// Whether gelu_tanh rides in the matmul's epilogue (not after a row-parallel matmul).
    ///
    /// cuBLASLt keeps the GELU pre-activation only with rows of a multiple of 8 elements.
    static constexpr bool fused_gelu = std::is_same_v<Activation, gelu_tanh> && local_out % 8 == 0 && !row;
    /// Whether forward keeps the pre-activation for backward: every activation but identity and relu (whose
    /// derivative the output gives).
    static constexpr bool keeps_pre_activation = !plain && !is_relu;
    /// How many ways the layer is split (1: not split).
    static constexpr int shard_ways = ways;
    /// Whether each rank holds only its slice of the output (column_parallel over more than one rank).
    static constexpr bool splits_output = column && ways > 1;
    /// Its name for errors, as linear::name().
    static std::string name() { return linear::name(); }

    /// weight [local_out, local_in] and bias [local_out], `U(+-1/sqrt(In))`; a split layer's specs say which slice of
    /// the unsplit layer's they are.
    static std::vector<parameter_spec> parameters() {
      return detail::linear_parameters(In, Out, local_in, local_out, column, row, ways, parts);
    }
    /// Views the bound weight, bias and their gradients.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, extents<index_t, local_out, local_in>>(p.values[0]);
      bias_ = shaped<precision, extents<index_t, local_out>>(p.values[1]);
      weight_gradient_ = shaped<precision, extents<index_t, local_out, local_in>>(p.gradients[0]);
      bias_gradient_ = shaped<precision, extents<index_t, local_out>>(p.gradients[1]);
    }
    /// Allocates on `stream` the pre-activation [max_batch * rows_per_sample, local_out] where backward needs it
    /// (keeps_pre_activation); nothing otherwise.
    void reserve(index_t max_batch, stream_t stream) {
      if constexpr (keeps_pre_activation)
        pre_activation_ = output_rows_tensor(output_rows_extents(max_batch * rows_per_sample), stream);
    }

    /// Split layers: connects to the group whose ranks hold the other slices (it must outlive the connection); throws
    /// fusor::error when its size is not `ways`.
    void connect(shard_group<Space>& group)
      requires sharded
    {
      shard_.connect(group, ways, name());
    }
    /// Split layers: leaves the group.
    void disconnect()
      requires sharded
    {
      shard_.disconnect();
    }
    /// Split layers: whether the layer is connected to its group.
    bool connected() const
      requires sharded
    {
      return shard_.connected();
    }
    /// Split layers: which slice this rank holds (0 before connect).
    int shard_index() const
      requires sharded
    {
      return shard_.shard_index();
    }

    /// `y = Activation(x w^T + b)` over `x.extent(0) * rows_per_sample` rows. Row-parallel: the partial products are
    /// summed over the ranks, rank 0 alone adding the bias, then the activation. A split layer throws fusor::error
    /// before connect.
    template <class Executor>
    void forward(const activation_view<precision, input_features, Space>& x,
                 const activation_view<precision, output_features, Space>& y, const run_mode&, const Executor& ex) {
      if constexpr (sharded) shard_.require_connected(name(), "forward");
      const index_t rows = x.extent(0) * rows_per_sample;
      const auto x_rows = input_rows(x.data(), rows);
      const auto y_rows = output_rows(y.data(), rows);
      const auto w = with_dynamic_extents(weight_);
      const auto b = with_dynamic_extents(bias_);
      if constexpr (row) {
        // Partial products summed over the ranks; the bias once (rank 0); then the activation.
        const auto sum = keeps_pre_activation ? pre_activation(rows) : y_rows;
        if (shard_.shard_index() == 0) detail::linear_bias_forward<precision, Space>(sum, x_rows, w, b, ex);
        else matmul(sum, x_rows, transpose(w), epilogue::none{}, ex);
        shard_.all_reduce_sum(sum, ex);
        if constexpr (!plain) assign(y_rows, Activation::function::apply(sum), ex);
      } else if constexpr (plain) {
        detail::linear_bias_forward<precision, Space>(y_rows, x_rows, w, b, ex);
      } else if constexpr (fused_relu) {
        detail::linear_relu_forward<precision, Space>(y_rows, x_rows, w, b, ex);
      } else if constexpr (fused_gelu) {
        matmul(y_rows, x_rows, transpose(w), epilogue::gelu_tanh(b, pre_activation(rows)), ex);
      } else {
        const auto pre = pre_activation(rows);
        detail::linear_bias_forward<precision, Space>(pre, x_rows, w, b, ex);
        assign(y_rows, Activation::function::apply(pre), ex);
      }
    }

    /// Masks dy in place by the activation's derivative, then dw = dy^T x with db fused, and dx = dy w when wanted
    /// (column-parallel: summed over the ranks). A split layer throws fusor::error before connect.
    template <class Executor>
    void backward(const activation_view<precision, input_features, Space>& x,
                  const activation_view<precision, output_features, Space>& y,
                  const activation_view<precision, output_features, Space>& dy,
                  const activation_view<precision, input_features, Space>& dx, const Executor& ex) {
      if constexpr (sharded) shard_.require_connected(name(), "backward");
      const index_t rows = x.extent(0) * rows_per_sample;
      const auto x_rows = input_rows(x.data(), rows);
      const auto dy_rows = output_rows(dy.data(), rows);
      // dy becomes the gradient of the pre-activation.
      if constexpr (is_relu) {
        detail::linear_relu_mask<precision, Space>(dy_rows, output_rows(y.data(), rows), ex);
      } else if constexpr (!plain) {
        const auto derivative_at = derivative(Activation::function::apply(arg<0>), arg<0>);
        assign(dy_rows, substitute(derivative_at, pre_activation(rows)) * dy_rows, ex);
      }
      (void)y;
      detail::linear_parameter_gradients<precision, Space>(with_dynamic_extents(weight_gradient_),
                                                           with_dynamic_extents(bias_gradient_), dy_rows, x_rows, ex);
      if (dx.data() == nullptr) return;
      const auto dx_rows = input_rows(dx.data(), rows);
      detail::linear_input_gradient<precision, Space>(dx_rows, dy_rows, with_dynamic_extents(weight_), ex);
      // A column slice's dx is its part of the whole input's gradient.
      if constexpr (column) shard_.all_reduce_sum(dx_rows, ex);
    }

   private:
    // Activations as the matmul sees them: one row per token, [rows, width]. Their extents, like the parameters'
    // in the matmuls, are dynamic (with_dynamic_extents): the network checked the sizes when it was composed, and
    // every linear of a precision then shares one instance of each kernel, compiled once.
    using rows_view = view<precision, dextents<index_t, 2>, row_major, Space>;
    using output_rows_extents = extents<index_t, dynamic, local_out>;
    using output_rows_tensor = tensor<precision, output_rows_extents, row_major, Space>;
    static rows_view input_rows(element* data, index_t rows) { return {data, rows, index_t(local_in)}; }
    static rows_view output_rows(element* data, index_t rows) { return {data, rows, index_t(local_out)}; }
    rows_view pre_activation(index_t rows) const { return output_rows(pre_activation_.data(), rows); }

    weight_view weight_{}, weight_gradient_{};
    bias_view bias_{}, bias_gradient_{};
    output_rows_tensor pre_activation_;
    shard_connection<Space> shard_;
  };
};

}  // namespace fusor::nn

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/nn/impl/linear.ipp"
#endif
