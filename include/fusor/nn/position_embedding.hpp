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

template <std::size_t Positions, std::size_t Channels, class... Policies>
struct position_embedding {
  static_assert(Positions > 0 && Channels > 0,
                "fusor::nn::position_embedding needs a positive number of positions and channels");
  using policies = layer_policies<row_major, Policies...>;

  template <class F>
  static constexpr bool accepts = std::is_same_v<F, features<Positions, Channels>>;
  using expected_input = features<Positions, Channels>;
  template <class F>
  using output = F;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    using element = storage_t<precision>;
    using input_features = F;
    using output_features = F;
    using activation = activation_view<precision, F, Space>;
    using table_view = view<precision, extents<index_t, Positions, Channels>, row_major, Space>;

    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Positions), index_t(Channels)}, initializer::uniform_fan_in(1, std::sqrt(3.0) * policies::init_std)}};
    }
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, extents<index_t, Positions, Channels>>(p.values[0]);
      weight_gradient_ = shaped<precision, extents<index_t, Positions, Channels>>(p.gradients[0]);
    }
    void reserve(index_t, stream_t) {}

    template <class Executor>
    void forward(const activation& x, const activation& y, const run_mode&, const Executor& ex) {
      assign(y, x + weight_, ex);
    }
    template <class Executor>
    void backward(const activation&, const activation&, const activation& dy, const activation& dx,
                  const Executor& ex) {
      fusor::sum(weight_gradient_, dy, 0, ex);
      if (dx.data() != nullptr) assign(dx, dy, ex);
    }

    table_view weight() const { return weight_; }

   private:
    table_view weight_{}, weight_gradient_{};
  };
};

}  // namespace fusor::nn
