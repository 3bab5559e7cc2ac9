// fusor/nn/residual.hpp — a skip connection around a chain of layers:
// y = x + chain<Layers...>(x), as a transformer's pre-norm blocks.
//
//   nn::residual<nn::layernorm<64>, nn::linear<64, 256, nn::gelu_tanh>, nn::linear<256, 64>>
//
// The chain must give back the features it gets (a compile-time error names
// both: residual_features_must_match). Parameters are the chain's, named by
// position inside it: "1.weight" in a residual at network position 3 is
// "3.1.weight" (a PyTorch module holding the same layers as its children
// "0", "1", ... loads them). Backward: dx = dy + dchain/dx(dy).
// Kept for backward: the chain's output (the last inner layer's y, which its
// backward may read) and what the chain keeps; scratch: a copy of dy (the
// chain's backward may overwrite the one it is given) and the chain's scratch.
// Forward is the chain and one fused pass (y = x + f); backward the chain and
// two passes (the copy, dx += dy), none of them when dx is not wanted.
#pragma once

#include <string>
#include <tuple>
#include <type_traits>

#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/nn/chain.hpp"

namespace fusor::nn {

/// nn::residual's input rule (nn/layer.hpp): the chain inside gives back the features it gets; named in the
/// compiler's message with what comes in and what the chain gives.
template <class Input, class BlockOutput, bool Match>
struct residual_features_must_match {
  /// Whether the chain gives back its input features.
  static constexpr bool value = Match;
  /// Fails to compile when it does not (nn::network's constructors and nn::sequential<> call it).
  static constexpr void check() {
    static_assert(Match, "fusor: nn::residual: the layers inside must give back the features they get (y = x + "
                         "f(x)); make the last inner layer's output the residual's input; see "
                         "residual_features_must_match<input features, features the inner layers give>");
  }
};

/// A skip connection around a chain of layers, y = x + chain<Layers...>(x), as a transformer's pre-norm blocks;
/// a composite layer descriptor whose parameters are the chain's, named by position inside it.
template <class... Layers>
struct residual {
  /// The chain of layers inside the skip connection.
  using block = chain<Layers...>;
  /// Whether features In can come in: whatever the chain's first layer accepts.
  template <class In>
  static constexpr bool accepts = block::template accepts<In>;
  /// What the chain's first layer wants, named in a size error.
  using expected_input = typename block::expected_input;
  /// The features that go out: In, which the chain must give back (input_rule).
  template <class In>
  using output = std::type_identity_t<In>;  // (nvcc's front end rejects an alias that is its parameter itself)
  /// The rule on what comes in beyond its size (nn/layer.hpp): the chain's own (its inner sizes), then that it
  /// gives back In.
  template <class In>
  using input_rule =
      std::conditional_t<block::template input_rule<In>::value,
                         residual_features_must_match<In, typename block::template output<In>,
                                                      std::is_same_v<In, typename block::template output<In>>>,
                         typename block::template input_rule<In>>;

  /// "nn::residual of N layers", for errors.
  static std::string name() { return "nn::residual of " + std::to_string(sizeof...(Layers)) + " layers"; }

  /// The chain's instance for input features In, the network's precision and memory Space.
  template <class In, class NetworkPrecision, class Space>
  using block_instance = typename block::template instance<In, NetworkPrecision, Space>;
  /// The residual bound to input features In, the network's precision and memory Space; holds the chain's
  /// instance and the memory it keeps between forward and backward.
  template <class In, class NetworkPrecision, class Space>
  class instance;
};

/// The residual bound to input features In, the network's precision and memory Space; holds the chain's
/// instance and the memory it keeps between forward and backward.
template <class... Layers>
template <class In, class NetworkPrecision, class Space>
class residual<Layers...>::instance
    : public detail::composite_shards<instance<In, NetworkPrecision, Space>, Space,
                                      std::tuple<block_instance<In, NetworkPrecision, Space>>> {
  using block_type = block_instance<In, NetworkPrecision, Space>;

 public:
  /// The network's precision: x, y and their gradients are in it.
  using precision = NetworkPrecision;
  /// The features that come in.
  using input_features = In;
  /// The same as the input's.
  using output_features = output<In>;
  /// x, y, dy and dx, batch first.
  using activation = activation_view<precision, In, Space>;
  /// The input view, an activation.
  using input_view = activation;
  /// The output view, an activation.
  using output_view = activation;
  static_assert(std::is_same_v<layer_input_precision<block_type>, precision>,
                "fusor: nn::residual: the first layer inside takes the residual's input, in the network's precision "
                "(an embedding cannot start a residual)");

  static constexpr index_t activation_bytes = detail::activation_bytes<precision, In>;  ///< one sample of x
  /// Activations kept from forward to backward, per sample: the chain's output and what it keeps.
  static constexpr index_t kept_bytes_per_sample = activation_bytes + block_type::kept_bytes_per_sample;
  /// Memory used only inside one forward or backward call, per sample: a copy of dy and the chain's scratch.
  static constexpr index_t scratch_bytes_per_sample = activation_bytes + block_type::scratch_bytes_per_sample;
  /// The kept memory reserve(max_batch) takes, in bytes (each region rounded to 256 bytes).
  static constexpr std::size_t kept_bytes(index_t max_batch) {
    return detail::region_bytes(activation_bytes, max_batch) + block_type::kept_bytes(max_batch);
  }
  /// The scratch memory reserve(max_batch) takes, in bytes (each region rounded to 256 bytes).
  static constexpr std::size_t scratch_bytes(index_t max_batch) {
    return detail::region_bytes(activation_bytes, max_batch) + block_type::scratch_bytes(max_batch);
  }

  /// "nn::residual of N layers", for errors.
  static std::string name() { return residual::name(); }
  /// The chain's parameters, named by position inside it ("1.weight").
  static std::vector<parameter_spec> parameters() { return block_type::parameters(); }
  /// Binds the chain's parameters.
  void bind(const parameter_binding<storage_t<precision>, Space>& binding) { block_.bind(binding); }
  /// Before reserve(): the memory an enclosing composite provides (nullptr: own it).
  void place(std::byte* kept, std::byte* scratch) { memory_.place(kept, scratch); }
  /// Allocates the kept and scratch memory not placed, for batches of up to max_batch, and reserves the chain's.
  void reserve(index_t max_batch, stream_t stream) {
    memory_.reserve(kept_bytes(max_batch), scratch_bytes(max_batch), stream);
    detail::region_cursor kept = memory_.kept(), scratch = memory_.scratch();
    block_output_ = kept.take(detail::region_bytes(activation_bytes, max_batch));
    dy_copy_ = scratch.take(detail::region_bytes(activation_bytes, max_batch));
    detail::reserve_inner(block_, kept, scratch.at, max_batch, stream);
  }
  /// Seeds the chain's random layers (dropout) from s.
  void seed(std::uint64_t s) { block_.seed(derive_seed(s, 0)); }

  /// y = x + chain(x); keeps the chain's output for backward.
  template <class Executor>
  void forward(const activation& x, const activation& y, const run_mode& mode, const Executor& ex) {
    const activation f = at(block_output_, x.extent(0));
    block_.forward(x, f, mode, ex);
    assign(y, x + f, ex);
  }
  /// The chain's parameter gradients and dx = dy + dchain/dx(dy); only the parameter gradients when dx.data()
  /// is null (the chain may then overwrite dy).
  template <class Executor>
  void backward(const activation& x, const activation&, const activation& dy, const activation& dx,
                const Executor& ex) {
    const activation f = at(block_output_, x.extent(0));
    if (dx.data() == nullptr) {  // the parameters' gradients only: the chain may use dy as it likes
      block_.backward(x, f, dy, dx, ex);
      return;
    }
    const activation dy_copy = at(dy_copy_, x.extent(0));
    assign(dy_copy, dy, ex);
    block_.backward(x, f, dy_copy, dx, ex);
    assign(dx, dx + dy, ex);
  }

  /// The chain's instance.
  block_type& inner() { return block_; }
  /// fn(instance) for the chain's instance, the residual's only inner layer.
  template <class Fn>
  void for_each_layer(Fn&& fn) {
    fn(block_);
  }

 private:
  static activation at(std::byte* region, index_t batch) {
    return detail::activation_at<precision, In, Space>(region, batch);
  }

  block_type block_;
  detail::composite_memory<Space> memory_;
  std::byte* block_output_ = nullptr;
  std::byte* dy_copy_ = nullptr;
};

/// residual<Layers...> is a composite: its layers are instantiated inside it.
template <class... Layers>
inline constexpr bool is_composite_v<residual<Layers...>> = true;

}  // namespace fusor::nn
