// tests/nn/swiglu_layer.hpp — a layer written by hand against fusor's layer
// protocol, shown whole in docs/layers.md: LLaMA's SwiGLU feed-forward
//
//   y = (silu(x W1^T) * (x W3^T)) W2^T      at every position of features<..., Dim>
//
// with PyTorch's names for three bias-free nn.Linear: w1.weight [Hidden, Dim],
// w2.weight [Dim, Hidden], w3.weight [Hidden, Dim].
#pragma once

#include <vector>

#include <fusor/core/strided_views.hpp>
#include <fusor/core/tensor.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/expr/derivative.hpp>
#include <fusor/expr/substitute.hpp>
#include <fusor/kernels/matmul.hpp>
#include <fusor/nn/layer.hpp>

namespace example {

using namespace fusor;

template <std::size_t Dim, std::size_t Hidden, class... Policies>
struct swiglu {
  using policies = nn::layer_policies<row_major, Policies...>;

  // Any features whose last axis is Dim; the axes before it are positions.
  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (nn::is_features_v<F>) return F::batched_extents::static_extent(F::rank) == Dim;
    else return false;
  }();
  using expected_input = nn::features<Dim>;
  template <class F>
  using output = F;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = nn::resolve_precision<typename policies::precision, NetworkPrecision>;
    using input_features = F;
    using output_features = F;
    using activation = nn::activation_view<precision, F, Space>;

    static std::vector<nn::parameter_spec> parameters() {
      return {{"w1.weight", {index_t(Hidden), index_t(Dim)}, nn::initializer::uniform_fan_in(Dim)},
              {"w2.weight", {index_t(Dim), index_t(Hidden)}, nn::initializer::uniform_fan_in(Hidden)},
              {"w3.weight", {index_t(Hidden), index_t(Dim)}, nn::initializer::uniform_fan_in(Dim)}};
    }
    void bind(const nn::parameter_binding<storage_t<precision>, Space>& p) {
      w1_ = nn::shaped<precision, in_weight_extents>(p.values[0]);
      w2_ = nn::shaped<precision, out_weight_extents>(p.values[1]);
      w3_ = nn::shaped<precision, in_weight_extents>(p.values[2]);
      w1_gradient_ = nn::shaped<precision, in_weight_extents>(p.gradients[0]);
      w2_gradient_ = nn::shaped<precision, out_weight_extents>(p.gradients[1]);
      w3_gradient_ = nn::shaped<precision, in_weight_extents>(p.gradients[2]);
    }
    // Kept for backward: a = x W1^T, b = x W3^T and h = silu(a) * b.
    void reserve(index_t max_batch, stream_t stream) {
      const hidden_extents rows(max_batch * positions);
      a_ = hidden_tensor(rows, stream);
      b_ = hidden_tensor(rows, stream);
      h_ = hidden_tensor(rows, stream);
    }

    template <class Executor>
    void forward(const activation& x, const activation& y, const nn::run_mode&, const Executor& ex) {
      const index_t rows = x.extent(0) * positions;
      const hidden_view a(a_.data(), rows), b(b_.data(), rows), h(h_.data(), rows);
      matmul(a, as_rows(x), transpose(w1_), ex);
      matmul(b, as_rows(x), transpose(w3_), ex);
      assign(h, silu(a) * b, ex);  // one fused pass
      matmul(as_rows(y), h, transpose(w2_), ex);
    }

    // dy may be overwritten (the protocol allows it): it holds db W3 at the end.
    template <class Executor>
    void backward(const activation& x, const activation&, const activation& dy, const activation& dx,
                  const Executor& ex) {
      const index_t rows = x.extent(0) * positions;
      const hidden_view a(a_.data(), rows), b(b_.data(), rows), h(h_.data(), rows);
      matmul(w2_gradient_, transpose(as_rows(dy)), h, ex);  // dW2 = dy^T h
      const hidden_view dh = h;                             // h is not needed any more
      matmul(dh, as_rows(dy), w2_, ex);                     // dh = dy W2
      // da = dh * b * silu'(a) and db = dh * silu(a), over a and b: one pass.
      const auto silu_derivative = derivative(silu(arg<0>), arg<0>);
      const hidden_view da = a, db = b;
      assign_many(ex, out(da, dh * b * substitute(silu_derivative, a)), out(db, dh * silu(a)));
      matmul(w1_gradient_, transpose(da), as_rows(x), ex);  // dW1 = da^T x
      matmul(w3_gradient_, transpose(db), as_rows(x), ex);  // dW3 = db^T x
      if (dx.data() == nullptr) return;                     // no input gradient wanted
      matmul(as_rows(dx), da, w1_, ex);                     // dx = da W1 + db W3
      matmul(as_rows(dy), db, w3_, ex);
      assign(dx, dx + dy, ex);
    }

   private:
    static constexpr index_t positions = F::size / index_t(Dim);  // rows per sample
    using in_weight_extents = extents<index_t, Hidden, Dim>;
    using out_weight_extents = extents<index_t, Dim, Hidden>;
    using hidden_extents = extents<index_t, dynamic, Hidden>;
    using hidden_tensor = tensor<precision, hidden_extents, row_major, Space>;
    using hidden_view = view<precision, hidden_extents, row_major, Space>;
    using row_view = view<precision, extents<index_t, dynamic, Dim>, row_major, Space>;
    static row_view as_rows(const activation& v) { return row_view(v.data(), v.extent(0) * positions); }

    view<precision, in_weight_extents, row_major, Space> w1_{}, w3_{}, w1_gradient_{}, w3_gradient_{};
    view<precision, out_weight_extents, row_major, Space> w2_{}, w2_gradient_{};
    hidden_tensor a_, b_, h_;
  };
};

}  // namespace example
