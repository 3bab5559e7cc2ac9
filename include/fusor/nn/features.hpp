// fusor/nn/features.hpp — the shape of one sample as it flows between layers.
//
// A network's feature shapes are static (checked and inferred at compile time);
// the batch is the one dynamic extent, leading. features<784> is a flat vector,
// features<1, 28, 28> an image in CHW order. An activation of features<F...> is
// a row-major view of extents<index_t, dynamic, F...>.
#pragma once

#include <cstddef>

#include "fusor/core/extents.hpp"
#include "fusor/core/layout.hpp"
#include "fusor/core/view.hpp"

namespace fusor::nn {

/// The static shape of one sample: `features<784>` is a flat vector, `features<1, 28, 28>` an image in CHW order. Every
/// extent is static and positive; the batch, added in front, is the one dynamic extent.
template <std::size_t... Sizes>
struct features {
  static_assert(sizeof...(Sizes) >= 1, "fusor: nn::features needs at least one extent");
  static_assert(((Sizes != dynamic && Sizes > 0) && ...),
                "fusor: nn::features are static and positive: the batch is the only dynamic extent");
  /// Number of feature axes (the batch not counted).
  static constexpr std::size_t rank = sizeof...(Sizes);
  /// Elements per sample: the product of Sizes.
  static constexpr index_t size = (index_t(1) * ... * index_t(Sizes));
  /// Extents of a batch of samples: [batch, Sizes...], the batch dynamic.
  using batched_extents = extents<index_t, dynamic, Sizes...>;
  /// Extents of one sample: [Sizes...].
  using sample_extents = extents<index_t, Sizes...>;
};

/// Whether T is an nn::features.
template <class T>
inline constexpr bool is_features_v = false;
/// True for every `features<S...>`.
template <std::size_t... S>
inline constexpr bool is_features_v<features<S...>> = true;

/// A batch of activations with these features, in this precision and space.
template <class Precision, class Features, class Space>
using activation_view = view<Precision, typename Features::batched_extents, row_major, Space>;

/// Whether F is an image, features<channels, height, width> (conv2d, max_pool2d).
template <class F>
inline constexpr bool is_image_v = false;
/// True for every `features<C, H, W>`.
template <std::size_t C, std::size_t H, std::size_t W>
inline constexpr bool is_image_v<features<C, H, W>> = true;

namespace detail {
// The extent at position Axis of features<S...>.
template <std::size_t Axis, std::size_t... S>
constexpr std::size_t feature_extent(features<S...>) {
  constexpr std::size_t sizes[] = {S...};
  return sizes[Axis];
}
}  // namespace detail

}  // namespace fusor::nn
