// fusor/nn/layernorm.hpp — layer normalisation over the last axis, as
// PyTorch's nn.LayerNorm(Features) (affine, epsilon 1e-5, biased variance).
//
//   nn::layernorm<256>     // features<..., 256> in and out: y = (x - mean) * rstd * weight + bias
//
// The work is fusor/kernels/layernorm.hpp: one fused pass per row forward,
// one backward giving dx, dweight and dbias (deterministic, no atomics).
// Parameters: weight [Features] (starts at 1) and bias [Features] (starts at 0).
// Kept for backward: the mean and 1/sqrt(var + epsilon) of every row (fp32,
// fp64 for an fp64 layer), allocated in reserve(). Every leading feature axis
// is a row too: features<Sequence, Features> normalises each position.
#pragma once

#include <type_traits>
#include <vector>

#include "fusor/core/tensor.hpp"
#include "fusor/kernels/layernorm.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

template <std::size_t Features, class... Policies>
struct layernorm {
  static_assert(Features > 0, "fusor::nn::layernorm needs a positive feature count");
  using policies = layer_policies<row_major, Policies...>;
  static constexpr float epsilon = 1e-5f;

  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (is_features_v<F>) return detail::feature_extent<F::rank - 1>(F{}) == Features;
    else return false;
  }();
  using expected_input = features<Features>;  // or any features<..., Features>
  template <class F>
  using output = F;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    using element = storage_t<precision>;
    // The row statistics: fp32 (what the kernels compute in), fp64 for fp64 layers.
    using statistics = std::conditional_t<std::is_same_v<element, double>, double, float>;
    using input_features = F;
    using output_features = F;
    using activation = activation_view<precision, F, Space>;
    static constexpr index_t rows_per_sample = F::size / index_t(Features);

    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Features)}, initializer::constant(1.0)},
              {"bias", {index_t(Features)}, initializer::constant(0.0)}};
    }
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, vector_extents>(p.values[0]);
      bias_ = shaped<precision, vector_extents>(p.values[1]);
      weight_gradient_ = shaped<precision, vector_extents>(p.gradients[0]);
      bias_gradient_ = shaped<precision, vector_extents>(p.gradients[1]);
    }
    void reserve(index_t max_batch, stream_t stream) {
      mean_ = statistics_tensor(dextents<index_t, 1>(max_batch * rows_per_sample), stream);
      rstd_ = statistics_tensor(dextents<index_t, 1>(max_batch * rows_per_sample), stream);
    }

    template <class Executor>
    void forward(const activation& x, const activation& y, const run_mode&, const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      fusor::layernorm(as_rows(y), per_row(mean_, rows), per_row(rstd_, rows), as_rows(x), weight_, bias_,
                       norm_options{epsilon}, ex);
    }
    template <class Executor>
    void backward(const activation& x, const activation&, const activation& dy, const activation& dx,
                  const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      // Without a dx to write, the input gradient goes into dy (the network's scratch).
      const activation& input_gradient = dx.data() != nullptr ? dx : dy;
      fusor::layernorm_backward(as_rows(input_gradient), weight_gradient_, bias_gradient_, as_rows(dy), as_rows(x),
                                weight_, per_row(mean_, rows), per_row(rstd_, rows), ex);
    }

   private:
    using vector_extents = extents<index_t, Features>;
    using row_view = view<precision, extents<index_t, dynamic, Features>, row_major, Space>;
    using statistics_tensor = tensor<statistics, dextents<index_t, 1>, row_major, Space>;
    static row_view as_rows(const activation& a) { return row_view(a.data(), a.extent(0) * rows_per_sample); }
    static view<statistics, dextents<index_t, 1>, row_major, Space> per_row(const statistics_tensor& t, index_t rows) {
      return {t.data(), rows};
    }

    view<precision, vector_extents, row_major, Space> weight_{}, bias_{}, weight_gradient_{}, bias_gradient_{};
    statistics_tensor mean_, rstd_;
  };
};

}  // namespace fusor::nn
