// fusor/nn/position_embedding.hpp — learned absolute position embeddings, as
// GPT-2's wpe: a table of one vector per position, added to every sample's
// token embeddings at that position.
//
//   nn::sequential<nn::features<64>,                   // 64 int32 token ids per sample
//                  nn::embedding<50257, 768>,          // -> features<64, 768>
//                  nn::position_embedding<64, 768>,    // y[b, t] = x[b, t] + weight[t]
//                  ...>
//
// Parameter: weight [Positions, Channels], initialised as nn::embedding's
// table (U(-sqrt(3), sqrt(3)): mean 0, variance 1, as PyTorch's nn.Embedding;
// nn::init_std<N, D> for deviation N / D).
// Forward is one fused pass (the table broadcast over the batch). Backward:
// dx = dy, and dweight = the sum of dy over the batch, by kernels/reduce.hpp
// along the batch axis: deterministic, in fp32 for bf16/fp16, rounded once.
// Kept for backward: nothing.
#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/reduce.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// Learned absolute position embeddings (GPT-2's wpe): y[b, t] = x[b, t] + weight[t], with a weight table of
/// [Positions, Channels]; a layer descriptor for sequential<>.
template <std::size_t Positions, std::size_t Channels, class... Policies>
struct position_embedding {
  static_assert(Positions > 0 && Channels > 0,
                "fusor: nn::position_embedding needs a positive number of positions and channels");
  /// The layer's policies, defaults filled in
  using policies = layer_policies<row_major, Policies...>;

  /// Whether features F can come in: exactly features<Positions, Channels>.
  template <class F>
  static constexpr bool accepts = std::is_same_v<F, features<Positions, Channels>>;
  /// What the layer wants, named in a size error
  using expected_input = features<Positions, Channels>;
  /// The features that go out: the input's, unchanged.
  template <class F>
  using output = F;

  /// The layer bound to input features F, the network's precision and memory Space; views its bound table.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// The activations' and table's precision: the layer's precision policy, or the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type stored for precision
    using element = storage_t<precision>;
    /// features<Positions, Channels>
    using input_features = F;
    /// The same as the input's
    using output_features = F;
    /// x, y, dy and dx, batch first
    using activation = activation_view<precision, F, Space>;
    /// The weight table, [Positions, Channels] row-major in Space.
    using table_view = view<precision, extents<index_t, Positions, Channels>, row_major, Space>;

    /// One parameter, "weight" [Positions, Channels], drawn uniform with deviation policies::init_std (default 1).
    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Positions), index_t(Channels)}, initializer::uniform_fan_in(1, std::sqrt(3.0) * policies::init_std)}};
    }
    /// Views the weight table and its gradient in the network's parameter storage.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, extents<index_t, Positions, Channels>>(p.values[0]);
      weight_gradient_ = shaped<precision, extents<index_t, Positions, Channels>>(p.gradients[0]);
    }
    /// Does nothing: the layer keeps nothing for backward.
    void reserve(index_t, stream_t) {}

    /// y = x + weight, the table broadcast over the batch, in one fused pass.
    template <class Executor>
    void forward(const activation& x, const activation& y, const run_mode&, const Executor& ex) {
      assign(y, x + weight_, ex);
    }
    /// dweight = the sum of dy over the batch (deterministic, fp32 accumulation for bf16/fp16); dx = dy
    /// unless dx.data() is null.
    template <class Executor>
    void backward(const activation&, const activation&, const activation& dy, const activation& dx,
                  const Executor& ex) {
      fusor::sum(weight_gradient_, dy, 0, ex);
      if (dx.data() != nullptr) assign(dx, dy, ex);
    }

    /// The bound weight table (empty before bind()).
    table_view weight() const { return weight_; }

   private:
    table_view weight_{}, weight_gradient_{};
  };
};

}  // namespace fusor::nn
