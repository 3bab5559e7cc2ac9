// fusor/nn/sequential.hpp — a network composed at compile time.
//
//   using mlp = nn::sequential<nn::features<784>,              // what one sample is
//                              nn::linear<784, 256, nn::relu>,
//                              nn::linear<256, 10>>;
//   nn::network<mlp, fs::bf16, fs::device_space> net(/*max_batch=*/256);
//
// sequential<> is a type: it infers every layer's input and output features
// from the first (static), checks that each layer accepts what the previous one
// makes — a mismatch is a compile-time error naming both layers and both
// feature shapes (nn/layer.hpp: layer_sizes_must_match) — and hands the chain
// to nn::network (nn/network.hpp), which holds the state.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "fusor/nn/features.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// Stands for "the network's input" where a previous layer is named.
struct network_input {};

namespace detail {
template <class... T>
struct type_list {};
template <class T, class List>
struct prepend;
template <class T, class... U>
struct prepend<T, type_list<U...>> {
  using type = type_list<T, U...>;
};

// The features entering each layer, checked one junction at a time.
template <std::size_t Position, class Previous, class In, class... Layers>
struct feature_chain {
  using inputs = type_list<>;
  using output = In;
};
template <std::size_t Position, class Previous, class In, class Layer, class... Rest>
struct feature_chain<Position, Previous, In, Layer, Rest...> {
  static constexpr bool match = layer_sizes_must_match<Position, Previous, Layer, In, typename Layer::expected_input,
                                                       Layer::template accepts<In>>::value;
  // After a mismatch, go on with what the layer expected: one error, not a cascade.
  using entering = std::conditional_t<match, In, typename Layer::expected_input>;
  using next = feature_chain<Position + 1, Layer, typename Layer::template output<entering>, Rest...>;
  using inputs = typename prepend<entering, typename next::inputs>::type;
  using output = typename next::output;
};

template <class Layers, class Inputs, class Precision, class Space>
struct bind_layers;
template <class... Layers, class... Inputs, class Precision, class Space>
struct bind_layers<type_list<Layers...>, type_list<Inputs...>, Precision, Space> {
  using type = std::tuple<layer_instance<Layers, Inputs, Precision, Space>...>;
};
}  // namespace detail

/// A network's layers composed at compile time: each layer's input features are inferred from Input (what one
/// sample is), and a layer that does not accept what the previous one makes is a compile-time error.
template <class Input, class... Layers>
struct sequential {
  static_assert(is_features_v<Input>,
                "fusor::nn::sequential's first argument is what one sample is: nn::features<...> (e.g. "
                "nn::features<784> or nn::features<1, 28, 28>)");
  static_assert(sizeof...(Layers) >= 1, "fusor::nn::sequential needs at least one layer");
  /// What one sample is
  using input_features = Input;
  /// The layer descriptors, in order
  using layers = detail::type_list<Layers...>;
  /// The features entering each layer, checked one junction at a time.
  using chain = detail::feature_chain<0, network_input, Input, Layers...>;
  /// What the last layer makes of one sample
  using output_features = typename chain::output;
  /// The number of layers
  static constexpr std::size_t depth = sizeof...(Layers);
  /// The stateful layers for one precision and memory space (what nn::network holds).
  template <class Precision, class Space>
  using instances = typename detail::bind_layers<layers, typename chain::inputs, Precision, Space>::type;
};

/// Whether T is an nn::sequential<...>.
template <class T>
inline constexpr bool is_sequential_v = false;
/// True for every nn::sequential<...>.
template <class I, class... L>
inline constexpr bool is_sequential_v<sequential<I, L...>> = true;

}  // namespace fusor::nn
