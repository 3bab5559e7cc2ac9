// fusor/nn/attention.hpp — causal multi-head self-attention as a layer: the
// softmax(q k^T / sqrt(D)) v of a GPT block, between its qkv projection and
// its output projection (both ordinary nn::linear layers).
//
//   nn::sequential<nn::features<T, C>,
//                  nn::linear<C, 3 * C>,                  // nanoGPT's c_attn
//                  nn::causal_attention<H, C / H>,        // features<T, 3C> -> features<T, C>
//                  nn::linear<C, C>>                      // c_proj
//
//   nn::causal_attention<H, D, nn::kv_heads<G>>           // grouped-query: G key/value heads
//   nn::causal_attention<H, D, nn::rotary<>>              // LLaMA's rotary embedding on q and k
//
// Input: features<T, (H + 2G) * D> per sample, queries of the H heads then
// the G key heads then the G value heads (G = H without nn::kv_heads);
// output: features<T, H * D>, head h at columns h * D. No parameters. The
// work is fusor/kernels/attention.hpp (fused, never T x T); kept for backward:
// each row's log-sum-exp, [batch, H, T] (fp32, fp64 for an fp64 layer), and
// with nn::rotary the rotated qkv, all allocated in reserve().
//
// nn::rotary<Base> rotates the pairs of neighbouring columns (2i, 2i + 1) of
// every query and key head at position t by t * Base^(-2i / D), as Meta's
// LLaMA (kernels/attention_rotary.hpp); D must be even. Its backward is the
// inverse rotation of dq and dk.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <vector>

#include "fusor/core/tensor.hpp"
#include "fusor/kernels/attention.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// Grouped-query attention: G key/value heads, each shared by Heads / G query heads.
template <std::size_t G>
struct kv_heads {
  static_assert(G > 0, "fusor: nn::kv_heads needs at least one key/value head");
  /// G, the number of key/value heads.
  static constexpr std::size_t value = G;
};
/// Rotary position embeddings with this base (LLaMA: 10000).
template <std::size_t Base = 10000>
struct rotary {
  static_assert(Base > 1, "fusor: nn::rotary needs a base above 1");
  /// Base, the base of the rotation frequencies `Base^(-2i / D)`.
  static constexpr std::size_t base = Base;
};

namespace detail {
template <class T>
inline constexpr std::size_t kv_heads_of = 0;  // not a kv_heads policy
template <std::size_t G>
inline constexpr std::size_t kv_heads_of<kv_heads<G>> = G;
template <class T>
inline constexpr std::size_t rotary_base_of = 0;  // not a rotary policy
template <std::size_t Base>
inline constexpr std::size_t rotary_base_of<rotary<Base>> = Base;
template <class T>
inline constexpr bool is_attention_policy_v = kv_heads_of<T> != 0 || rotary_base_of<T> != 0;

// layer_policies<row_major, the policies that are not attention's own...>.
template <class Kept, class... Rest>
struct common_policies;
template <class... Kept>
struct common_policies<std::tuple<Kept...>> {
  using type = layer_policies<row_major, Kept...>;
};
template <class... Kept, class First, class... Rest>
struct common_policies<std::tuple<Kept...>, First, Rest...> {
  using type = typename common_policies<
      std::conditional_t<is_attention_policy_v<First>, std::tuple<Kept...>, std::tuple<Kept..., First>>, Rest...>::type;
};

// The first nonzero value, or `fallback`.
template <std::size_t Fallback, std::size_t... Values>
constexpr std::size_t first_nonzero() {
  std::size_t found = 0;
  ((found = found == 0 ? Values : found), ...);
  return found == 0 ? Fallback : found;
}
}  // namespace detail

/// Causal multi-head self-attention, the `softmax(q k^T / sqrt(HeadDim)) v` of a GPT block, with no parameters:
/// `features<T, (Heads + 2G) * HeadDim>` in (the H query heads, then the G key and G value heads),
/// `features<T, Heads * HeadDim>` out.
///
/// Policies: `nn::kv_heads<G>` (grouped-query; G = Heads without it), `nn::rotary<Base>` (rotary embedding of q and k;
/// HeadDim even) and the usual layer policies.
template <std::size_t Heads, std::size_t HeadDim, class... Policies>
struct causal_attention {
  static_assert(Heads > 0 && HeadDim > 0, "fusor: nn::causal_attention needs at least one head of one column");
  /// The layer policies among Policies (all but kv_heads and rotary), resolved.
  using policies = typename detail::common_policies<std::tuple<>, Policies...>::type;
  /// Heads, the number of query heads.
  static constexpr std::size_t heads = Heads;
  /// HeadDim, the columns of one head.
  static constexpr std::size_t head_dim = HeadDim;
  /// Key/value heads: G of `nn::kv_heads<G>`, else Heads.
  static constexpr std::size_t kv_heads = detail::first_nonzero<Heads, detail::kv_heads_of<Policies>...>();
  /// Base of `nn::rotary<Base>`; 0 without rotary.
  static constexpr std::size_t rotary_base = detail::first_nonzero<0, detail::rotary_base_of<Policies>...>();
  /// Whether q and k are rotated (nn::rotary among Policies).
  static constexpr bool has_rotary = rotary_base != 0;
  static_assert(Heads % kv_heads == 0, "fusor: nn::causal_attention: nn::kv_heads<G> must divide the query heads");
  static_assert(!has_rotary || HeadDim % 2 == 0,
                "fusor: nn::rotary rotates pairs of columns: the head size must be even");
  /// Columns of x per position: `(Heads + 2 kv_heads) * HeadDim`, the queries, then the keys, then the values.
  static constexpr std::size_t input_width = (Heads + 2 * kv_heads) * HeadDim;
  /// Columns of y per position: `Heads * HeadDim`, head h at columns `h * HeadDim`.
  static constexpr std::size_t output_width = Heads * HeadDim;

  /// `features<T, input_width>` for any sequence length T.
  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (is_features_v<F>)
      return F::rank == 2 && detail::feature_extent<F::rank - 1>(F{}) == input_width;
    else
      return false;
  }();
  /// Named in mismatch errors; any `features<T, input_width>` is accepted.
  using expected_input = features<1, input_width>;  // any features<T, (H + 2G) * D>
  /// `features<T, output_width>`, T from the input.
  template <class F>
  using output = features<detail::feature_extent<0>(F{}), output_width>;

  /// The layer given input features F = `features<T, input_width>`, the network's precision and a memory Space: it
  /// keeps each row's log-sum-exp (and with rotary the rotated qkv) for backward.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of x and y: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type `precision` stores.
    using element = storage_t<precision>;
    /// Type of the kept log-sum-exp: fp32, fp64 for an fp64 layer.
    using statistics = std::conditional_t<std::is_same_v<element, double>, double, float>;
    /// F, the input features.
    using input_features = F;
    /// `features<T, output_width>`.
    using output_features = output<F>;
    /// T, the sequence length.
    static constexpr std::size_t time = detail::feature_extent<0>(F{});

    /// None: attention has no parameters.
    static std::vector<parameter_spec> parameters() { return {}; }
    /// Does nothing: there are no parameters.
    void bind(const parameter_binding<element, Space>&) {}
    /// Allocates on `stream`, for up to max_batch samples, the log-sum-exp [batch, Heads, T] and, with rotary, the
    /// rotated qkv.
    void reserve(index_t max_batch, stream_t stream) {
      lse_ = lse_tensor(typename lse_tensor::extents_type(max_batch), stream);
      if constexpr (has_rotary) rotated_ = rotated_tensor(typename rotated_tensor::extents_type(max_batch), stream);
    }

    /// y = causal attention of x's queries, keys and values (fused, never T x T), q and k rotated first with rotary;
    /// keeps each row's log-sum-exp.
    template <class Executor>
    void forward(const activation_view<precision, F, Space>& x,
                 const activation_view<precision, output_features, Space>& y, const run_mode&, const Executor& ex) {
      const index_t batch = x.extent(0);
      if constexpr (has_rotary) {
        const auto rotated = rotated_view(batch);
        fusor::rotary_embedding(rotated, x, shape(), rotary_options{double(rotary_base)}, ex);
        fusor::causal_attention(y, lse_view(batch), rotated, shape(), ex);
      } else {
        fusor::causal_attention(y, lse_view(batch), x, shape(), ex);
      }
    }
    /// dx (the gradients of q, k and v) from dy, y and what forward kept, with rotary rotated back; nothing when dx is
    /// not wanted (`dx.data() == nullptr`).
    template <class Executor>
    void backward(const activation_view<precision, F, Space>& x,
                  const activation_view<precision, output_features, Space>& y,
                  const activation_view<precision, output_features, Space>& dy,
                  const activation_view<precision, F, Space>& dx, const Executor& ex) {
      if (dx.data() == nullptr) return;  // no parameters: nothing else to compute
      const index_t batch = x.extent(0);
      if constexpr (has_rotary) {
        fusor::causal_attention_backward(dx, dy, rotated_view(batch), y, lse_view(batch), shape(), ex);
        fusor::rotary_embedding(dx, dx, shape(), rotary_options{double(rotary_base), true}, ex);
      } else {
        fusor::causal_attention_backward(dx, dy, x, y, lse_view(batch), shape(), ex);
      }
    }

   private:
    using lse_tensor = tensor<statistics, extents<index_t, dynamic, Heads, time>, row_major, Space>;
    using rotated_tensor = tensor<precision, typename F::batched_extents, row_major, Space>;
    static constexpr attention_heads shape() { return {index_t(Heads), index_t(kv_heads)}; }
    auto lse_view(index_t batch) const {
      return view<statistics, typename lse_tensor::extents_type, row_major, Space>(lse_.data(), batch);
    }
    auto rotated_view(index_t batch) const { return activation_view<precision, F, Space>(rotated_.data(), batch); }

    lse_tensor lse_;
    rotated_tensor rotated_;
  };
};

}  // namespace fusor::nn
