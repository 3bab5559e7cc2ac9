// fusor/nn/chain.hpp — a sub-sequence of layers as one layer.
//
//   using block = nn::chain<nn::layernorm<64>, nn::linear<64, 256, nn::gelu_tanh>, nn::linear<256, 64>>;
//   nn::sequential<nn::features<64>, block, block, nn::linear<64, 10>>
//
// Features are inferred through the chain at compile time, as sequential<>
// does (a mismatch inside names both layers, their position in the chain and
// both shapes: layer_sizes_must_match, with nn::composite_input standing for
// the chain's input; it is the chain's input rule, reported at nn::network's
// constructor). Parameters are named as in an nn.Sequential nested in
// another: "<inner position>.<name>", so "1.weight" in a chain at network
// position 3 is "3.1.weight". Kept for backward: the output of every inner
// layer but the last (which writes the chain's y); scratch: the gradients
// between inner layers, two regions used in turn (nn/composite.hpp).
#pragma once

#include <array>
#include <string>
#include <tuple>
#include <type_traits>

#include "fusor/nn/composite.hpp"

namespace fusor::nn {

namespace detail {
// The features through a chain's layers given In. Not checked here: a mismatch
// inside is the chain's input rule (chain_failure), which nn::network checks.
template <class In, class... Layers>
using inner_chain = feature_chain<0, composite_input, In, Layers...>;
}  // namespace detail

/// A sub-sequence of layers as one layer: `Ln(...L1(L0(x)))`, usable anywhere a layer is.
///
/// Features are inferred through it as sequential<> does; its parameters are named `"<inner position>.<name>"`
/// (nn/composite.hpp has its memory scheme).
template <class... Layers>
struct chain {
  static_assert(sizeof...(Layers) >= 1, "fusor: nn::chain needs at least one layer");
  /// The first inner layer, which decides what comes in.
  using first_layer = std::tuple_element_t<0, std::tuple<Layers...>>;
  /// Number of inner layers.
  static constexpr std::size_t depth = sizeof...(Layers);

  /// The first layer decides what comes in; a mismatch further in is the input rule's.
  template <class In>
  static constexpr bool accepts = first_layer::template accepts<In>;
  /// The first layer's expected input.
  using expected_input = typename first_layer::expected_input;
  /// The last inner layer's output features given In (after a mismatch inside, as if the sizes matched).
  template <class In>
  using output = typename detail::inner_chain<In, Layers...>::output;
  /// The rule on what comes in (nn/layer.hpp): every inner junction matches (layer_sizes_must_match) and every
  /// inner layer's own rule holds; the first that fails is the error.
  template <class In>
  using input_rule = detail::chain_failure<detail::inner_chain<In, Layers...>>;

  /// `"nn::chain of N layers"`, for messages.
  static std::string name() { return "nn::chain of " + std::to_string(depth) + " layers"; }

  /// The inner layers' instances, given what comes in (a std::tuple).
  template <class In, class NetworkPrecision, class Space>
  using inner_instances =
      typename detail::bind_layers<detail::type_list<Layers...>,
                                   typename detail::inner_chain<In, Layers...>::inputs,
                                   NetworkPrecision, Space>::type;

  template <class In, class NetworkPrecision, class Space>
  class instance;
};

/// The chain given input features In, the network's precision and a memory Space: its inner layers' instances and the
/// activations between them.
template <class... Layers>
template <class In, class NetworkPrecision, class Space>
class chain<Layers...>::instance
    : public detail::composite_shards<instance<In, NetworkPrecision, Space>, Space,
                                      inner_instances<In, NetworkPrecision, Space>>,
      public detail::input_precision_member<std::tuple_element_t<0, inner_instances<In, NetworkPrecision, Space>>> {
  using through = detail::inner_chain<In, Layers...>;
  using inner_tuple = inner_instances<In, NetworkPrecision, Space>;
  template <std::size_t I>
  using inner = std::tuple_element_t<I, inner_tuple>;
  static constexpr std::size_t last = depth - 1;

 public:
  /// The network's precision, that of y; every inner layer stores its element type.
  using precision = NetworkPrecision;
  /// In, the input features.
  using input_features = In;
  /// The last inner layer's output features.
  using output_features = typename through::output;
  /// Precision of x: the first inner layer's input_precision where it names one (an embedding), else `precision`.
  using x_precision = typename detail::composite_input_precision<inner<0>, precision>::type;
  /// A batch of x (or dx).
  using input_view = activation_view<x_precision, In, Space>;
  /// A batch of y (or dy).
  using output_view = activation_view<precision, output_features, Space>;
  static_assert([]<std::size_t... I>(std::index_sequence<I...>) {
    return detail::inner_storage_matches<precision, inner<I>...>();
  }(std::make_index_sequence<depth>{}));

 private:
  // Bytes per sample of inner layer I's output (I < last: kept here).
  template <std::size_t I>
  static constexpr index_t junction_bytes =
      detail::activation_bytes<typename inner<I>::precision, typename inner<I>::output_features>;
  static constexpr index_t own_kept_per_sample = []<std::size_t... I>(std::index_sequence<I...>) {
    return (index_t(0) + ... + junction_bytes<I>);
  }(std::make_index_sequence<last>{});
  // The gradient of junction I lives in region I % 2: a layer reads one and writes the other.
  static constexpr std::array<index_t, 2> gradient_bytes = []<std::size_t... I>(std::index_sequence<I...>) {
    std::array<index_t, 2> bytes{0, 0};
    ((bytes[I % 2] = std::max(bytes[I % 2], junction_bytes<I>)), ...);
    return bytes;
  }(std::make_index_sequence<last>{});
  using children = detail::inner_memory<inner_tuple>;

 public:
  /// Activations this chain holds from forward to backward, per sample (its
  /// inner layers' own state, a linear's pre-activation say, not counted).
  static constexpr index_t kept_bytes_per_sample = own_kept_per_sample + children::kept_per_sample;
  /// Memory used only inside one forward or backward call, per sample.
  static constexpr index_t scratch_bytes_per_sample =
      gradient_bytes[0] + gradient_bytes[1] + children::scratch_per_sample;
  /// Bytes of kept memory reserve(max_batch) takes (each region rounded to 256 bytes).
  static constexpr std::size_t kept_bytes(index_t max_batch) {
    return []<std::size_t... I>(std::index_sequence<I...>, [[maybe_unused]] index_t n) {
      return (std::size_t(0) + ... + detail::region_bytes(junction_bytes<I>, n));
    }(std::make_index_sequence<last>{}, max_batch) + children::kept_bytes(max_batch);
  }
  /// Bytes of scratch memory reserve(max_batch) takes (each region rounded to 256 bytes).
  static constexpr std::size_t scratch_bytes(index_t max_batch) {
    return detail::region_bytes(gradient_bytes[0], max_batch) + detail::region_bytes(gradient_bytes[1], max_batch) +
           children::scratch_bytes(max_batch);
  }

  /// The descriptor's name(), for messages.
  static std::string name() { return chain::name(); }
  /// The inner layers' parameter specs in order, each name prefixed by its inner position (`"1.weight"`).
  static std::vector<parameter_spec> parameters() { return detail::prefixed_parameters<inner_tuple>::get(); }
  /// Hands each inner layer its own consecutive part of the binding; throws fusor::error when the binding's count does
  /// not match the inner layers'.
  void bind(const parameter_binding<storage_t<precision>, Space>& binding) { detail::bind_inner(inner_, binding); }
  /// Before reserve(): the memory an enclosing composite provides (nullptr: own it).
  void place(std::byte* kept, std::byte* scratch) { memory_.place(kept, scratch); }
  /// Allocates on `stream` the kept and scratch blocks not placed, for up to max_batch samples, then places and
  /// reserves the inner layers.
  void reserve(index_t max_batch, stream_t stream) {
    memory_.reserve(kept_bytes(max_batch), scratch_bytes(max_batch), stream);
    detail::region_cursor kept = memory_.kept(), scratch = memory_.scratch();
    detail::for_each_index<last>([&]<std::size_t I>() {
      outputs_[I] = kept.take(detail::region_bytes(junction_bytes<I>, max_batch));
    });
    gradients_[0] = scratch.take(detail::region_bytes(gradient_bytes[0], max_batch));
    gradients_[1] = scratch.take(detail::region_bytes(gradient_bytes[1], max_batch));
    detail::for_each_index<depth>([&]<std::size_t I>() {
      detail::reserve_inner(std::get<I>(inner_), kept, scratch.at, max_batch, stream);
    });
  }
  /// Gives every inner layer that takes a seed (dropout) one derived from s and its inner position.
  void seed(std::uint64_t s) { detail::seed_inner(inner_, s); }

  /// Runs the inner layers' forwards in order, keeping their outputs for backward; the last one writes y.
  template <class Executor>
  void forward(const input_view& x, const output_view& y, const run_mode& mode, const Executor& ex) {
    detail::for_each_index<depth>([&]<std::size_t I>() {
      std::get<I>(inner_).forward(input_of<I>(x), output_of<I>(y), mode, ex);
    });
  }
  /// Inner layers in reverse; the first gets dx (data() == nullptr: not wanted).
  template <class Executor>
  void backward(const input_view& x, const output_view& y, const output_view& dy, const input_view& dx,
                const Executor& ex) {
    backward_from<last>(x, y, dy, dx, ex);
  }

  /// Inner layer I's instance.
  template <std::size_t I>
  inner<I>& layer() { return std::get<I>(inner_); }
  /// Calls fn(instance) for each inner layer's instance, in order.
  template <class Fn>
  void for_each_layer(Fn&& fn) {
    std::apply([&](auto&... layer) { (fn(layer), ...); }, inner_);
  }

 private:
  template <std::size_t I>
  using inner_input_view =
      activation_view<layer_input_precision<inner<I>>, typename inner<I>::input_features, Space>;
  template <std::size_t I>
  using inner_output_view = activation_view<typename inner<I>::precision, typename inner<I>::output_features, Space>;

  // Inner layer I's input or output over a region of this chain's memory.
  template <std::size_t I>
  static inner_input_view<I> input_at(std::byte* region, index_t batch) {
    return {reinterpret_cast<storage_t<layer_input_precision<inner<I>>>*>(region), batch};
  }
  template <std::size_t I>
  static inner_output_view<I> output_at(std::byte* region, index_t batch) {
    return {reinterpret_cast<storage_t<typename inner<I>::precision>*>(region), batch};
  }
  template <std::size_t I>
  inner_input_view<I> input_of(const input_view& x) const {
    if constexpr (I == 0) return detail::with_precision<layer_input_precision<inner<0>>>(x);
    else return input_at<I>(outputs_[I - 1], x.extent(0));
  }
  template <std::size_t I>
  inner_output_view<I> output_of(const output_view& y) const {
    if constexpr (I == last) return detail::with_precision<typename inner<I>::precision>(y);
    else return output_at<I>(outputs_[I], y.extent(0));
  }
  template <std::size_t I, class Executor>
  void backward_from(const input_view& x, const output_view& y, const output_view& dy, const input_view& dx,
                     const Executor& ex) {
    const index_t batch = x.extent(0);
    inner_output_view<I> dy_inner{};
    if constexpr (I == last) dy_inner = detail::with_precision<typename inner<I>::precision>(dy);
    else dy_inner = output_at<I>(gradients_[I % 2], batch);
    inner_input_view<I> dx_inner{};
    if constexpr (I == 0) dx_inner = detail::with_precision<layer_input_precision<inner<0>>>(dx);
    else dx_inner = input_at<I>(gradients_[(I - 1) % 2], batch);
    std::get<I>(inner_).backward(input_of<I>(x), output_of<I>(y), dy_inner, dx_inner, ex);
    if constexpr (I > 0) backward_from<I - 1>(x, y, dy, dx, ex);
  }

  inner_tuple inner_;
  detail::composite_memory<Space> memory_;
  std::array<std::byte*, depth> outputs_{};  // junction I < last
  std::array<std::byte*, 2> gradients_{};
};

/// A chain is a composite.
template <class... Layers>
inline constexpr bool is_composite_v<chain<Layers...>> = true;

/// Whether T is an nn::chain.
template <class T>
inline constexpr bool is_chain_v = false;
/// True for every `chain<Layers...>`.
template <class... Layers>
inline constexpr bool is_chain_v<chain<Layers...>> = true;

}  // namespace fusor::nn
