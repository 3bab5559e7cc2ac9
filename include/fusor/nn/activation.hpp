// fusor/nn/activation.hpp — elementwise layers, and how a user makes one.
//
// A function written once as a fusor expression becomes a layer whose forward
// is one fused pass and whose backward is its compile-time derivative, also one
// fused pass:
//
//   struct scaled_swish {                                // the user's activation
//     static auto apply(const auto& x) { return x * fusor::sigmoid(1.702f * x); }
//   };
//   using swish = nn::elementwise<scaled_swish>;          // a layer: y = f(x), dx = f'(x) dy
//   nn::linear<784, 256, swish>                          // or fused after a linear's matmul
//
// nn::relu, nn::gelu_tanh, nn::silu (x * sigmoid(x), as PyTorch's nn.SiLU),
// nn::tanh_activation, nn::sigmoid_activation and nn::identity are such layers;
// linear<> fuses relu and gelu_tanh into its matmul.
#pragma once

#include <vector>

#include "fusor/exec/assign.hpp"
#include "fusor/expr/derivative.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/expr/substitute.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// A layer that applies Function to every element: y = f(x) in one fused pass, and `dx = f'(x) dy` in one more, f' the
/// compile-time derivative.
///
/// Function: a type with `static auto apply(const auto& x)` returning a fusor expression of x (it is also called with a
/// placeholder, to differentiate it). Policies are layer policies (nn/policies.hpp), a precision say.
template <class Function, class... Policies>
struct elementwise {
  /// The function applied; nn::linear reads it to fuse its activation.
  using function = Function;
  /// The layer's policies, resolved (nn/policies.hpp).
  using policies = layer_policies<row_major, Policies...>;

  /// Any features: the function works per element.
  template <class F>
  static constexpr bool accepts = is_features_v<F>;
  /// Named in mismatch errors only; any features are accepted, so none occur.
  using expected_input = features<1>;  // any features; never a mismatch
  /// The input features, unchanged.
  template <class F>
  using output = F;

  /// The layer given input features F, the network's precision and a memory Space: no parameters, nothing kept.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of x and y: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// F, the input features.
    using input_features = F;
    /// F: the output has the input's features.
    using output_features = F;
    /// None: the layer has no parameters.
    static std::vector<parameter_spec> parameters() { return {}; }
    /// Does nothing: there are no parameters.
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    /// Does nothing: the layer keeps nothing for backward.
    void reserve(index_t, stream_t) {}

    /// `y = Function::apply(x)`, one fused pass under executor ex.
    template <class Executor>
    void forward(const activation_view<precision, F, Space>& x, const activation_view<precision, F, Space>& y,
                 const run_mode&, const Executor& ex) {
      assign(y, Function::apply(x), ex);
    }
    /// `dx = f'(x) dy` in one fused pass, f' the derivative of `Function::apply` at x; nothing when dx is not wanted
    /// (`dx.data() == nullptr`).
    template <class Executor>
    void backward(const activation_view<precision, F, Space>& x, const activation_view<precision, F, Space>&,
                  const activation_view<precision, F, Space>& dy, const activation_view<precision, F, Space>& dx,
                  const Executor& ex) {
      if (dx.data() == nullptr) return;
      const auto derivative_at = derivative(Function::apply(arg<0>), arg<0>);
      assign(dx, substitute(derivative_at, x) * dy, ex);
    }
  };
};

/// The functions behind fusor's elementwise layers, each usable as nn::elementwise's Function.
namespace functions {
/// f(x) = x, behind nn::identity.
struct identity {
  /// x itself.
  static auto apply(const auto& x) { return x; }
};
/// f(x) = max(x, 0), behind nn::relu.
struct relu {
  /// The expression fusor::relu(x).
  static auto apply(const auto& x) { return fusor::relu(x); }
};
/// GELU in its tanh approximation, behind nn::gelu_tanh.
struct gelu_tanh {
  /// The expression fusor::gelu_tanh(x).
  static auto apply(const auto& x) { return fusor::gelu_tanh(x); }
};
/// f(x) = tanh(x), behind nn::tanh_activation.
struct tanh {
  /// The expression fusor::tanh(x).
  static auto apply(const auto& x) { return fusor::tanh(x); }
};
/// f(x) = 1 / (1 + exp(-x)), behind nn::sigmoid_activation.
struct sigmoid {
  /// The expression fusor::sigmoid(x).
  static auto apply(const auto& x) { return fusor::sigmoid(x); }
};
/// f(x) = `x * sigmoid(x)`, behind nn::silu.
struct silu {
  /// The expression fusor::silu(x).
  static auto apply(const auto& x) { return fusor::silu(x); }
};
}  // namespace functions

/// y = x: no activation (nn::linear's default).
using identity = elementwise<functions::identity>;
/// y = max(x, 0); nn::linear fuses it into its matmul's epilogue.
using relu = elementwise<functions::relu>;
/// GELU, tanh approximation; nn::linear fuses it into its matmul's epilogue where it can.
using gelu_tanh = elementwise<functions::gelu_tanh>;
/// y = tanh(x).
using tanh_activation = elementwise<functions::tanh>;
/// y = 1 / (1 + exp(-x)).
using sigmoid_activation = elementwise<functions::sigmoid>;
/// y = `x * sigmoid(x)`, as PyTorch's nn.SiLU.
using silu = elementwise<functions::silu>;

/// Whether T is an elementwise layer: what nn::linear takes as its activation.
template <class T>
inline constexpr bool is_activation_v = false;
/// True for every `elementwise<F, P...>`.
template <class F, class... P>
inline constexpr bool is_activation_v<elementwise<F, P...>> = true;

}  // namespace fusor::nn
