// fusor/nn/flatten.hpp — features<A, B, ...> becomes features<A * B * ...>,
// as PyTorch's nn.Flatten between a CNN's convolutions and its linear layers.
//
//   nn::sequential<nn::features<1, 28, 28>, nn::conv2d<1, 8, 3, 1, 1>, nn::max_pool2d<2>,
//                  nn::flatten, nn::linear<8 * 14 * 14, 10>>
//
// Row-major activations already lie in the flattened order, so this is a
// change of type. The network gives each layer its own output buffer, though,
// so forward copies x into y and backward dy into dx: one vectorised pass each
// (no parameters, nothing kept for backward).
#pragma once

#include <vector>

#include "fusor/exec/assign.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// Flattens `features<A, B, ...>` into `features<A * B * ...>`, as PyTorch's nn.Flatten between a CNN's convolutions
/// and its linear layers. No parameters; forward and backward are one copy pass each.
struct flatten {
  /// Any features.
  template <class F>
  static constexpr bool accepts = is_features_v<F>;
  /// Named in mismatch errors only; any features are accepted, so none occur.
  using expected_input = features<1>;  // any features; never a mismatch
  /// `features<F::size>`: one axis of all of F's elements.
  template <class F>
  using output = features<std::size_t(F::size)>;

  /// The layer given input features F, the network's precision and a memory Space: no parameters, nothing kept.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// The network's precision: flatten takes no policies.
    using precision = NetworkPrecision;
    /// F, the input features.
    using input_features = F;
    /// `features<F::size>`.
    using output_features = features<std::size_t(F::size)>;
    /// A batch of x (or dx).
    using input_view = activation_view<precision, input_features, Space>;
    /// A batch of y (or dy).
    using output_view = activation_view<precision, output_features, Space>;

    /// None: the layer has no parameters.
    static std::vector<parameter_spec> parameters() { return {}; }
    /// Does nothing: there are no parameters.
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    /// Does nothing: the layer keeps nothing for backward.
    void reserve(index_t, stream_t) {}

    /// Copies x into y, the same elements in the same order, in one pass.
    template <class Executor>
    void forward(const input_view& x, const output_view& y, const run_mode&, const Executor& ex) {
      assign(y, output_view(x.data(), x.extent(0)), ex);
    }
    /// Copies dy into dx in one pass; nothing when dx is not wanted (`dx.data() == nullptr`).
    template <class Executor>
    void backward(const input_view&, const output_view&, const output_view& dy, const input_view& dx,
                  const Executor& ex) {
      if (dx.data() != nullptr) assign(output_view(dx.data(), dx.extent(0)), dy, ex);
    }
  };
};

}  // namespace fusor::nn
