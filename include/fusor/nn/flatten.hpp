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

struct flatten {
  template <class F>
  static constexpr bool accepts = is_features_v<F>;
  using expected_input = features<1>;  // any features; never a mismatch
  template <class F>
  using output = features<std::size_t(F::size)>;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = NetworkPrecision;
    using input_features = F;
    using output_features = features<std::size_t(F::size)>;
    using input_view = activation_view<precision, input_features, Space>;
    using output_view = activation_view<precision, output_features, Space>;

    static std::vector<parameter_spec> parameters() { return {}; }
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    void reserve(index_t, stream_t) {}

    template <class Executor>
    void forward(const input_view& x, const output_view& y, const run_mode&, const Executor& ex) {
      assign(y, output_view(x.data(), x.extent(0)), ex);
    }
    template <class Executor>
    void backward(const input_view&, const output_view&, const output_view& dy, const input_view& dx,
                  const Executor& ex) {
      if (dx.data() != nullptr) assign(output_view(dx.data(), dx.extent(0)), dy, ex);
    }
  };
};

}  // namespace fusor::nn
