// fusor/nn/tied_linear.hpp — a linear layer without bias whose weight is another
// layer's (weight tying): GPT-2's output head, logits = h wte^T, reads the token
// embedding's table instead of a [vocabulary, channels] matrix of its own.
//
//   nn::sequential<nn::features<T>, nn::embedding<V, C>, ..., nn::layernorm<C>,
//                  nn::tied_linear<C, V, 0>>          // its weight is "0.weight"
//
// Owner is the network position of the layer whose "weight" this is, of shape
// [Out, In]: an nn::embedding<Out, In>'s table, or an nn::linear<In, Out>'s
// weight. It must come before this layer (at the top level of the network, in
// the same pipeline stage, not sharded); the network checks all of it when it
// is built. The network binds the owner's values here; this layer's backward
// writes its dW into a gradient of its own, which the network adds into the
// owner's as soon as the owner's backward has run, so optimizers, gradient
// norms, all-reduces and checkpoints see the weight once, under the owner's
// name (as PyTorch's state_dict with lm_head.weight = wte.weight, loaded with
// strict=False). Per token: features<Lead..., In> in, features<Lead..., Out> out.
#pragma once

#include <string>
#include <vector>

#include "fusor/core/tensor.hpp"
#include "fusor/kernels/matmul.hpp"
#include "fusor/nn/layer.hpp"
#include "fusor/nn/linear.hpp"

namespace fusor::nn {

/// A linear layer without bias, y = x W^T, whose weight W [Out, In] is the "weight" of the layer at network
/// position Owner (weight tying, as GPT-2's output head); a layer descriptor for sequential<>.
template <std::size_t In, std::size_t Out, std::size_t Owner, class... Policies>
struct tied_linear {
  static_assert(In > 0 && Out > 0, "fusor: nn::tied_linear needs positive sizes");
  /// The layer's policies; parallel must be no_parallel
  using policies = layer_policies<row_major, Policies...>;
  static_assert(std::is_same_v<typename policies::parallel, no_parallel>,
                "fusor: nn::tied_linear cannot be split for tensor parallelism");

  /// Whether features F can come in: any features<..., In> (applied per token).
  template <class F>
  static constexpr bool accepts = detail::last_feature_is<F, In>;
  using expected_input = features<In>;  ///< or any features<..., In>
  /// The features that go out for input features F: F with its last extent In replaced by Out.
  template <class F>
  using output = typename detail::features_with_last<F, Out>::type;

  /// The layer bound to input features F, the network's precision and memory Space; views the owner's weight.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// The activations' and weight's precision: the layer's precision policy, or the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type stored for precision
    using element = storage_t<precision>;
    /// features<..., In>
    using input_features = F;
    /// features<..., Out>
    using output_features = output<F>;
    /// Tokens per sample (rows of In)
    static constexpr index_t rows_per_sample = F::size / index_t(In);
    /// The weight's shape, [Out, In]
    using weight_extents = extents<index_t, Out, In>;
    /// The weight (or its gradient)
    using weight_view = view<precision, weight_extents, row_major, Space>;

    /// One parameter, "weight" [Out, In], tied to "<Owner>.weight": the network binds the owner's values.
    static std::vector<parameter_spec> parameters() {
      parameter_spec weight{"weight", {index_t(Out), index_t(In)}, initializer::uniform_fan_in(In)};
      weight.tied_to = std::to_string(Owner) + ".weight";
      return {weight};
    }
    /// Views the (owner's) weight values and this layer's own weight gradient.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, weight_extents>(p.values[0]);
      weight_gradient_ = shaped<precision, weight_extents>(p.gradients[0]);
    }
    /// Does nothing: the layer keeps nothing beyond x, which the network keeps.
    void reserve(index_t, stream_t) {}

    /// y = x W^T, row by row (one row per token).
    template <class Executor>
    void forward(const activation_view<precision, input_features, Space>& x,
                 const activation_view<precision, output_features, Space>& y, const run_mode&, const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      matmul(output_rows(y.data(), rows), input_rows(x.data(), rows), transpose(weight_), ex);
    }

    /// dW = dy^T x into this layer's own gradient (the network adds it into the owner's);
    /// dx = dy W unless dx.data() is null.
    template <class Executor>
    void backward(const activation_view<precision, input_features, Space>& x,
                  const activation_view<precision, output_features, Space>&,
                  const activation_view<precision, output_features, Space>& dy,
                  const activation_view<precision, input_features, Space>& dx, const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      const auto dy_rows = output_rows(dy.data(), rows);
      matmul(weight_gradient_, transpose(dy_rows), input_rows(x.data(), rows), ex);
      if (dx.data() != nullptr) matmul(input_rows(dx.data(), rows), dy_rows, weight_, ex);
    }

   private:
    using input_rows_view = view<precision, extents<index_t, dynamic, In>, row_major, Space>;
    using output_rows_view = view<precision, extents<index_t, dynamic, Out>, row_major, Space>;
    static input_rows_view input_rows(element* data, index_t rows) { return {data, rows}; }
    static output_rows_view output_rows(element* data, index_t rows) { return {data, rows}; }

    weight_view weight_{}, weight_gradient_{};
  };
};

}  // namespace fusor::nn
