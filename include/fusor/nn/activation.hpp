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

// Function: a type with `static auto apply(const auto& x)` returning a fusor
// expression of x (it is also called with a placeholder, to differentiate it).
template <class Function, class... Policies>
struct elementwise {
  using function = Function;
  using policies = layer_policies<row_major, Policies...>;

  template <class F>
  static constexpr bool accepts = is_features_v<F>;
  using expected_input = features<1>;  // any features; never a mismatch
  template <class F>
  using output = F;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    using input_features = F;
    using output_features = F;
    static std::vector<parameter_spec> parameters() { return {}; }
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    void reserve(index_t, stream_t) {}

    template <class Executor>
    void forward(const activation_view<precision, F, Space>& x, const activation_view<precision, F, Space>& y,
                 const run_mode&, const Executor& ex) {
      assign(y, Function::apply(x), ex);
    }
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

namespace functions {
struct identity {
  static auto apply(const auto& x) { return x; }
};
struct relu {
  static auto apply(const auto& x) { return fusor::relu(x); }
};
struct gelu_tanh {
  static auto apply(const auto& x) { return fusor::gelu_tanh(x); }
};
struct tanh {
  static auto apply(const auto& x) { return fusor::tanh(x); }
};
struct sigmoid {
  static auto apply(const auto& x) { return fusor::sigmoid(x); }
};
struct silu {
  static auto apply(const auto& x) { return fusor::silu(x); }
};
}  // namespace functions

using identity = elementwise<functions::identity>;
using relu = elementwise<functions::relu>;
using gelu_tanh = elementwise<functions::gelu_tanh>;
using tanh_activation = elementwise<functions::tanh>;
using sigmoid_activation = elementwise<functions::sigmoid>;
using silu = elementwise<functions::silu>;

template <class T>
inline constexpr bool is_activation_v = false;
template <class F, class... P>
inline constexpr bool is_activation_v<elementwise<F, P...>> = true;

}  // namespace fusor::nn
