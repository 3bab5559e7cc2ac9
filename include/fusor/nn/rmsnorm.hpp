// fusor/nn/rmsnorm.hpp — RMS normalisation over the last axis, as PyTorch's
// nn.RMSNorm(Features, eps=1e-5) (elementwise affine, no bias).
//
//   nn::rmsnorm<256>     // features<..., 256> in and out: y = x / sqrt(mean(x^2) + epsilon) * weight
//
// The work is fusor/kernels/layernorm.hpp's rmsnorm: one fused pass per row
// forward, one backward giving dx and dweight (deterministic, no atomics).
// Parameter: weight [Features] (starts at 1). Kept for backward: 1/rms of
// every row (fp32, fp64 for an fp64 layer), allocated in reserve(). Every
// leading feature axis is a row too: features<Sequence, Features> normalises
// each position.
#pragma once

#include <type_traits>
#include <vector>

#include "fusor/core/tensor.hpp"
#include "fusor/kernels/layernorm.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// RMS normalisation over the last axis, y = x / sqrt(mean(x^2) + epsilon) * weight, as PyTorch's
/// nn.RMSNorm(Features, eps=1e-5); a layer descriptor for sequential<>.
template <std::size_t Features, class... Policies>
struct rmsnorm {
  static_assert(Features > 0, "fusor: nn::rmsnorm needs a positive feature count");
  /// The layer's policies, defaults filled in
  using policies = layer_policies<row_major, Policies...>;
  /// Added to mean(x^2) before the square root
  static constexpr float epsilon = 1e-5f;

  /// Whether features F can come in: any features<..., Features>.
  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (is_features_v<F>) return detail::feature_extent<F::rank - 1>(F{}) == Features;
    else return false;
  }();
  using expected_input = features<Features>;  ///< or any features<..., Features>
  /// The features that go out: the input's, unchanged.
  template <class F>
  using output = F;

  /// The layer bound to input features F, the network's precision and memory Space; keeps 1/rms per row.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// The activations' and weight's precision: the layer's precision policy, or the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type stored for precision
    using element = storage_t<precision>;
    /// The row statistics: fp32 (what the kernels compute in), fp64 for fp64 layers.
    using statistics = std::conditional_t<std::is_same_v<element, double>, double, float>;
    /// features<..., Features>
    using input_features = F;
    /// The same as the input's
    using output_features = F;
    /// x, y, dy and dx, batch first
    using activation = activation_view<precision, F, Space>;
    /// Rows normalised per sample
    static constexpr index_t rows_per_sample = F::size / index_t(Features);

    /// One parameter, "weight" [Features], starting at 1.
    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Features)}, initializer::constant(1.0)}};
    }
    /// Views the weight and its gradient in the network's parameter storage.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, vector_extents>(p.values[0]);
      weight_gradient_ = shaped<precision, vector_extents>(p.gradients[0]);
    }
    /// Allocates 1/rms of every row (statistics) for batches of up to max_batch, in Space.
    void reserve(index_t max_batch, stream_t stream) {
      rstd_ = statistics_tensor(dextents<index_t, 1>(max_batch * rows_per_sample), stream);
    }

    /// y = x / sqrt(mean(x^2) + epsilon) * weight, one fused pass per row; keeps 1/rms of each row.
    template <class Executor>
    void forward(const activation& x, const activation& y, const run_mode&, const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      fusor::rmsnorm(as_rows(y), per_row(rows), as_rows(x), weight_, norm_options{epsilon}, ex);
    }
    /// dweight and dx in one deterministic pass; without a dx (dx.data() null) the input gradient overwrites dy.
    template <class Executor>
    void backward(const activation& x, const activation&, const activation& dy, const activation& dx,
                  const Executor& ex) {
      const index_t rows = x.extent(0) * rows_per_sample;
      // Without a dx to write, the input gradient goes into dy (the network's scratch).
      const activation& input_gradient = dx.data() != nullptr ? dx : dy;
      fusor::rmsnorm_backward(as_rows(input_gradient), weight_gradient_, as_rows(dy), as_rows(x), weight_,
                              per_row(rows), ex);
    }

   private:
    using vector_extents = extents<index_t, Features>;
    using row_view = view<precision, extents<index_t, dynamic, Features>, row_major, Space>;
    using statistics_tensor = tensor<statistics, dextents<index_t, 1>, row_major, Space>;
    static row_view as_rows(const activation& a) { return row_view(a.data(), a.extent(0) * rows_per_sample); }
    view<statistics, dextents<index_t, 1>, row_major, Space> per_row(index_t rows) const {
      return {rstd_.data(), rows};
    }

    view<precision, vector_extents, row_major, Space> weight_{}, weight_gradient_{};
    statistics_tensor rstd_;
  };
};

}  // namespace fusor::nn
