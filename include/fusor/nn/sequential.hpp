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

// The features entering each layer, junction by junction: `mismatch` is the
// layer_sizes_must_match of the first junction that does not match (value
// false), else one whose value is true. The owner (sequential, a composite)
// static_asserts it; after a mismatch the chain goes on with what the layer
// expected, so a mistake is one error, not a cascade.
//
// `rule_failure` is the input rule (layer.hpp) of the first layer whose rule fails
// on what enters it, else no_input_rule: its check() is the error.
template <std::size_t Position, class Previous, class In, class... Layers>
struct feature_chain {
  using inputs = type_list<>;
  using output = In;
  using mismatch = layer_sizes_must_match<Position, Previous, network_input, In, In, true>;
  using rule_failure = no_input_rule;
};
template <std::size_t Position, class Previous, class In, class Layer, class... Rest>
struct feature_chain<Position, Previous, In, Layer, Rest...> {
  using junction = layer_sizes_must_match<Position, Previous, Layer, In, typename Layer::expected_input,
                                          Layer::template accepts<In>>;
  static constexpr bool match = junction::value;
  using entering = std::conditional_t<match, In, typename Layer::expected_input>;
  using next = feature_chain<Position + 1, Layer, typename Layer::template output<entering>, Rest...>;
  using inputs = typename prepend<entering, typename next::inputs>::type;
  using output = typename next::output;
  using mismatch = std::conditional_t<match, typename next::mismatch, junction>;
  using rule = typename input_rule_of<Layer, entering>::type;
  using rule_failure = std::conditional_t<rule::value, typename next::rule_failure, rule>;
};
// A composite's feature_chain as one input rule (nn/layer.hpp): the first inner junction whose sizes do not match,
// else the first inner layer's rule that fails, else no_input_rule. A composite declares it as its input_rule, so a
// mistake inside it is reported as one error at nn::network's constructor, as sequential<>'s own are.
template <class Chain>
using chain_failure =
    std::conditional_t<Chain::mismatch::value, typename Chain::rule_failure, typename Chain::mismatch>;

template <class Layers, class Inputs, class Precision, class Space>
struct bind_layers;
template <class... Layers, class... Inputs, class Precision, class Space>
struct bind_layers<type_list<Layers...>, type_list<Inputs...>, Precision, Space> {
  using type = std::tuple<layer_instance<Layers, Inputs, Precision, Space>...>;
};
}  // namespace detail

template <class Input, class... Layers>
struct sequential;

namespace detail {
// What nn::sequential<Input, Layers...> is made of, read without instantiating it:
// nn::network reads it here, so that a layer size mismatch is one error, at
// its constructor (where the caller's line is), and sequential<> alone is
// checked when it is instantiated.
template <class Sequential>
struct sequential_parts {};
template <class Input, class... Layers>
struct sequential_parts<sequential<Input, Layers...>> {
  static_assert(is_features_v<Input>,
                "fusor: nn::sequential's first argument is what one sample is: nn::features<...> (e.g. "
                "nn::features<784> or nn::features<1, 28, 28>)");
  static_assert(sizeof...(Layers) >= 1, "fusor: nn::sequential needs at least one layer");
  using input_features = Input;
  using layers = type_list<Layers...>;
  using chain = feature_chain<0, network_input, Input, Layers...>;
  using output_features = typename chain::output;
  static constexpr std::size_t depth = sizeof...(Layers);
  template <class Precision, class Space>
  using instances = typename bind_layers<layers, typename chain::inputs, Precision, Space>::type;
};
}  // namespace detail

/// A network's layers composed at compile time: each layer's input features are inferred from Input (what one
/// sample is), and a layer that does not accept what the previous one makes is a compile-time error.
template <class Input, class... Layers>
struct sequential {
  /// What one sample is
  using input_features = typename detail::sequential_parts<sequential>::input_features;
  /// The layer descriptors, in order
  using layers = typename detail::sequential_parts<sequential>::layers;
  /// The features entering each layer, checked one junction at a time.
  using chain = typename detail::sequential_parts<sequential>::chain;
  /// What the last layer makes of one sample
  using output_features = typename chain::output;
  /// The number of layers
  static constexpr std::size_t depth = sizeof...(Layers);
  /// The stateful layers for one precision and memory space (what nn::network holds).
  template <class Precision, class Space>
  using instances = typename detail::bind_layers<layers, typename chain::inputs, Precision, Space>::type;

  // Last in the class (clang stops instantiating members after an error): a mismatch is one error, naming both
  // layers and both features. nn::network checks the same in its constructors, without instantiating this.
  static_assert(chain::mismatch::value, FUSOR_LAYER_SIZES_MESSAGE);
  static_assert((chain::rule_failure::check(), true));  // a layer's own rule (layer.hpp's input_rule)
};

/// Whether T is an nn::sequential<...>.
template <class T>
inline constexpr bool is_sequential_v = false;
/// True for every nn::sequential<...>.
template <class I, class... L>
inline constexpr bool is_sequential_v<sequential<I, L...>> = true;

}  // namespace fusor::nn
