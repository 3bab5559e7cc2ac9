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

/// Layer normalisation over the last axis, as PyTorch's nn.LayerNorm(Features): affine, epsilon 1e-5, biased variance;
/// `y = (x - mean) * rstd * weight + bias` per row.
///
/// Every leading feature axis is a row too: `features<Sequence, Features>` normalises each position.
template <std::size_t Features, class... Policies>
struct layernorm {
  static_assert(Features > 0, "fusor: nn::layernorm needs a positive feature count");
  /// The layer's policies, resolved (nn/policies.hpp).
  using policies = layer_policies<row_major, Policies...>;
  /// Added to the variance before the square root: 1e-5, as PyTorch's default.
  static constexpr float epsilon = 1e-5f;

  /// Any `features<..., Features>`.
  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (is_features_v<F>) return detail::feature_extent<F::rank - 1>(F{}) == Features;
    else return false;
  }();
  /// Named in mismatch errors; any `features<..., Features>` is accepted.
  using expected_input = features<Features>;  // or any features<..., Features>
  /// The input features, unchanged.
  template <class F>
  using output = F;

  /// The layer given input features F, the network's precision and a memory Space: its weight and bias, and each row's
  /// mean and `1/sqrt(var + epsilon)`, kept for backward.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of x, y and the parameters: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type `precision` stores.
    using element = storage_t<precision>;
    /// The row statistics: fp32 (what the kernels compute in), fp64 for fp64 layers.
    using statistics = std::conditional_t<std::is_same_v<element, double>, double, float>;
    /// F, the input features.
    using input_features = F;
    /// F: the output has the input's features.
    using output_features = F;
    /// A batch of x, y, dy or dx.
    using activation = activation_view<precision, F, Space>;
    /// Rows normalised per sample: the product of the leading feature extents.
    static constexpr index_t rows_per_sample = F::size / index_t(Features);

    /// weight [Features], starting at 1, and bias [Features], starting at 0.
    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Features)}, initializer::constant(1.0)},
              {"bias", {index_t(Features)}, initializer::constant(0.0)}};
    }
    /// Views the bound weight, bias and their gradients.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, vector_extents>(p.values[0]);
      bias_ = shaped<precision, vector_extents>(p.values[1]);
      weight_gradient_ = shaped<precision, vector_extents>(p.gradients[0]);
      bias_gradient_ = shaped<precision, vector_extents>(p.gradients[1]);
    }
    /// Allocates on `stream` the mean and rstd of every row, for up to max_batch samples.
    void reserve(index_t max_batch, stream_t stream) {
      mean_ = statistics_tensor(dextents<index_t, 1>(max_batch * rows_per_sample), stream);
      rstd_ = statistics_tensor(dextents<index_t, 1>(max_batch * rows_per_sample), stream);
    }

    /// Normalises every row of x into y in one fused pass per row, keeping its mean and rstd.
    template <class Executor>
    void forward(const activation& x, const activation& y, const run_mode&, const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      fusor::layernorm(as_rows(y), per_row(mean_, rows), per_row(rstd_, rows), as_rows(x), weight_, bias_,
                       norm_options{epsilon}, ex);
    }
    /// dweight, dbias and dx in one deterministic backward; without a dx to write, the input gradient goes into dy (the
    /// network's scratch).
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
