// fusor/nn/linear.hpp — a fully connected layer, y = activation(x w^T + b), with
// the bias and the activation fused into the matmul's epilogue (cuBLASLt on
// the GPU, OpenBLAS + one fused pass on the host).
//
//   nn::linear<784, 256, nn::relu>      // w: [256, 784] (PyTorch's layout), b: [256]
//   nn::linear<256, 10>                 // no activation
//
// Activations: nn::identity, nn::relu and nn::gelu_tanh ride in the epilogue;
// any other elementwise function (nn::elementwise<F>, including a user's) is
// one more fused pass, and its backward the compile-time derivative.
// Backward: dy is masked by the activation's derivative in place (one pass,
// none for identity), then dw = dy^T x with db fused into the same matmul, and
// dx = dy w. Initialisation as PyTorch: U(+-1/sqrt(in)) for w and b.
#pragma once

#include <type_traits>
#include <vector>

#include "fusor/core/strided_views.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/derivative.hpp"
#include "fusor/expr/substitute.hpp"
#include "fusor/kernels/matmul.hpp"
#include "fusor/nn/activation.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

template <std::size_t In, std::size_t Out, class Activation = identity, class... Policies>
struct linear {
  static_assert(In > 0 && Out > 0, "fusor::nn::linear needs positive sizes");
  static_assert(is_activation_v<Activation>,
                "fusor::nn::linear's third argument is an activation: nn::identity, nn::relu, nn::gelu_tanh or "
                "nn::elementwise<F>");
  using policies = layer_policies<row_major, Policies...>;
  static_assert(std::is_same_v<typename policies::parallel, no_parallel>,
                "fusor::nn::linear: parallel strategies come with fusor/parallel (tensor-parallel layers)");

  template <class F>
  static constexpr bool accepts = std::is_same_v<F, features<In>>;
  using expected_input = features<In>;
  template <class F>
  using output = features<Out>;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    using element = storage_t<precision>;
    using input_features = features<In>;
    using output_features = features<Out>;
    using weight_view = view<precision, extents<index_t, Out, In>, row_major, Space>;
    using bias_view = view<precision, extents<index_t, Out>, row_major, Space>;
    static constexpr bool fused_relu = std::is_same_v<Activation, relu>;
    // cuBLASLt keeps the GELU pre-activation only with rows of a multiple of 8 elements.
    static constexpr bool fused_gelu = std::is_same_v<Activation, gelu_tanh> && Out % 8 == 0;
    static constexpr bool plain = std::is_same_v<Activation, identity>;
    // Everything except relu (whose derivative the output gives) keeps the pre-activation.
    static constexpr bool keeps_pre_activation = !plain && !fused_relu;

    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Out), index_t(In)}, initializer::uniform_fan_in(In)},
              {"bias", {index_t(Out)}, initializer::uniform_fan_in(In)}};
    }
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, extents<index_t, Out, In>>(p.values[0]);
      bias_ = shaped<precision, extents<index_t, Out>>(p.values[1]);
      weight_gradient_ = shaped<precision, extents<index_t, Out, In>>(p.gradients[0]);
      bias_gradient_ = shaped<precision, extents<index_t, Out>>(p.gradients[1]);
    }
    void reserve(index_t max_batch, stream_t stream) {
      if constexpr (keeps_pre_activation)
        pre_activation_ = tensor<precision, typename output_features::batched_extents, row_major, Space>(
            typename output_features::batched_extents(max_batch), stream);
    }

    template <class Executor>
    void forward(const activation_view<precision, input_features, Space>& x,
                 const activation_view<precision, output_features, Space>& y, const run_mode&, const Executor& ex) {
      const auto w_t = transpose(weight_);
      if constexpr (plain) {
        matmul(y, x, w_t, epilogue::bias(bias_), ex);
      } else if constexpr (fused_relu) {
        matmul(y, x, w_t, epilogue::relu(bias_), ex);
      } else if constexpr (fused_gelu) {
        matmul(y, x, w_t, epilogue::gelu_tanh(bias_, pre_activation(x.extent(0))), ex);
      } else {
        const auto pre = pre_activation(x.extent(0));
        matmul(pre, x, w_t, epilogue::bias(bias_), ex);
        assign(y, Activation::function::apply(pre), ex);
      }
    }

    template <class Executor>
    void backward(const activation_view<precision, input_features, Space>& x,
                  const activation_view<precision, output_features, Space>& y,
                  const activation_view<precision, output_features, Space>& dy,
                  const activation_view<precision, input_features, Space>& dx, const Executor& ex) {
      // dy becomes the gradient of the pre-activation.
      if constexpr (fused_relu) {
        assign(dy, where(y > 0, dy, 0), ex);
      } else if constexpr (!plain) {
        const auto derivative_at = derivative(Activation::function::apply(arg<0>), arg<0>);
        assign(dy, substitute(derivative_at, pre_activation(x.extent(0))) * dy, ex);
      }
      (void)y;
      matmul(weight_gradient_, transpose(dy), x, epilogue::bias_gradient_a(bias_gradient_), ex);
      if (dx.data() != nullptr) matmul(dx, dy, weight_, epilogue::none{}, ex);
    }

   private:
    activation_view<precision, output_features, Space> pre_activation(index_t batch) const {
      return {pre_activation_.data(), batch};
    }
    weight_view weight_{}, weight_gradient_{};
    bias_view bias_{}, bias_gradient_{};
    tensor<precision, typename output_features::batched_extents, row_major, Space> pre_activation_;
  };
};

}  // namespace fusor::nn
