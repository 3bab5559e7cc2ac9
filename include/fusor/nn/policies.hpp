// fusor/nn/policies.hpp — the policies a layer takes, in any order, each with a
// default: its precision (default: the network's), its layout, and the slot the
// parallel strategy fills (default: not parallel).
//
//   nn::linear<784, 256, nn::relu>                                 // all defaults
//   nn::linear<784, 256, nn::relu, nn::precision<tf32>>            // this layer on tf32 tensor cores
//
// Policies are small tag types; a layer reads them with layer_policies<...>.
#pragma once

#include <cstddef>
#include <type_traits>

namespace fusor::nn {

/// "Whatever the network uses": the default precision of every layer.
struct inherit {};

/// Policy: the layer computes in precision P (e.g. nn::precision<tf32>) instead of the network's.
template <class P>
struct precision {
  /// The precision P
  using type = P;
};

/// The layout of a layer's activations or weights. Each layer has one yet,
/// its default (row_major weights, PyTorch's; nchw images); naming another
/// does not compile.
template <class L>
struct layout {
  /// The layout L
  using type = L;
};

/// The standard deviation a table starts with (nn::embedding,
/// nn::position_embedding), Numerator / Denominator: GPT-2 draws its token and
/// position tables with 0.02 (nn::init_std<2, 100>); default 1, as PyTorch's
/// nn.Embedding. The draw is uniform with that deviation.
template <std::size_t Numerator, std::size_t Denominator>
struct init_std {
  static_assert(Numerator > 0 && Denominator > 0, "fusor: nn::init_std<N, D> is N / D, both positive");
  /// Numerator / Denominator
  static constexpr double value = double(Numerator) / double(Denominator);
};

/// The parallel strategy slot: no_parallel by default; the parallelism part
/// (tensor-parallel column/row layers) fills it.
struct no_parallel {};
/// Policy: the layer's parallel strategy S (column_parallel, row_parallel; see nn/sharding.hpp).
template <class S>
struct parallel {
  /// The strategy S
  using type = S;
};

namespace detail {
template <template <class> class Tag, class T>
inline constexpr bool is_tag_v = false;
template <template <class> class Tag, class X>
inline constexpr bool is_tag_v<Tag, Tag<X>> = true;

template <template <class> class Tag, class Default, class... Policies>
struct find_policy {
  using type = Default;
};
template <template <class> class Tag, class Default, class First, class... Rest>
struct find_policy<Tag, Default, First, Rest...> {
  using type = std::conditional_t<is_tag_v<Tag, First>, First, typename find_policy<Tag, Default, Rest...>::type>;
};
template <class T>
inline constexpr bool is_init_std_v = false;
template <std::size_t N, std::size_t D>
inline constexpr bool is_init_std_v<init_std<N, D>> = true;
template <class T>
inline constexpr bool is_policy_v = is_tag_v<precision, T> || is_tag_v<layout, T> || is_tag_v<parallel, T> || is_init_std_v<T>;

template <class Default, class... Policies>
struct find_init_std {
  using type = Default;
};
template <class Default, class First, class... Rest>
struct find_init_std<Default, First, Rest...> {
  using type = std::conditional_t<is_init_std_v<First>, First, typename find_init_std<Default, Rest...>::type>;
};
}  // namespace detail

/// The policies of one layer, defaults filled in.
template <class DefaultLayout, class... Policies>
struct layer_policies {
  static_assert((detail::is_policy_v<Policies> && ...),
                "fusor: nn: a layer's policies are nn::precision<P>, nn::layout<L>, nn::parallel<S> and (tables) "
                "nn::init_std<N, D>");
  /// The precision policy's P, or inherit (the network's) when none is given.
  using precision = typename detail::find_policy<nn::precision, nn::precision<inherit>, Policies...>::type::type;
  /// The layout policy's L, or DefaultLayout when none is given.
  using layout = typename detail::find_policy<nn::layout, nn::layout<DefaultLayout>, Policies...>::type::type;
  static_assert(std::is_same_v<layout, DefaultLayout>,
                "fusor: every layer has one layout yet, its default, and nn::layout<L> may name only that: "
                "row_major for linear, layernorm and the other feature layers (PyTorch's [out, in] weights), nchw "
                "for conv2d and max_pool2d");
  /// The parallel policy's strategy, or no_parallel when none is given.
  using parallel = typename detail::find_policy<nn::parallel, nn::parallel<no_parallel>, Policies...>::type::type;
  /// The init_std policy's value, or 1 when none is given.
  static constexpr double init_std = detail::find_init_std<nn::init_std<1, 1>, Policies...>::type::value;
};

/// A layer's precision once the network's is known: NetworkPrecision where the layer's is inherit.
template <class LayerPrecision, class NetworkPrecision>
using resolve_precision = std::conditional_t<std::is_same_v<LayerPrecision, inherit>, NetworkPrecision, LayerPrecision>;

}  // namespace fusor::nn
