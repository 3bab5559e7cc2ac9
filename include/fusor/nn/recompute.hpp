// fusor/nn/recompute.hpp — activation checkpointing as a wrapper: forward
// keeps nothing of the block but its input (which the layer before keeps
// anyway); backward runs the block's forward again, then its backward.
//
//   using block = nn::residual<nn::layernorm<64>, nn::linear<64, 256, nn::gelu_tanh>, nn::linear<256, 64>>;
//   nn::chain<nn::recomputed<block>, nn::recomputed<block>, nn::recomputed<block>>
//
// nn::recomputed<Block> wraps one composite (chain, residual, branches);
// nn::recomputed<Layers...> with several layers (or one that is not a
// composite) wraps nn::chain<Layers...>. It is transparent: the parameters
// keep the block's names, so a checkpoint loads with or without recompute,
// and the gradients are bit for bit the same (the same passes run again on
// the same inputs; dropout draws the same mask from the same step).
//
// Memory: what the block keeps (kept_bytes_per_sample) moves into the
// wrapper's scratch, which is dead between calls. Recomputed blocks inside
// one composite share one scratch block, so N of them keep the activations
// of one: kept_bytes_per_sample is 0, and recomputed_bytes_per_sample says
// what each stops keeping. At the top level of an nn::sequential each
// composite owns its scratch (network.hpp hands out none), so put the
// recomputed blocks in one nn::chain to share it. The inner layers' own
// state (a linear's pre-activation, a layernorm's row statistics) stays
// allocated per layer: it is refreshed by the second forward.
// Cost: one more forward of the block per backward.
#pragma once

#include <string>
#include <tuple>
#include <type_traits>

#include "fusor/nn/chain.hpp"

namespace fusor::nn {

namespace detail {
template <class... Layers>
struct recomputed_block {
  using type = chain<Layers...>;
};
template <class Layer>
  requires is_composite_v<Layer>
struct recomputed_block<Layer> {
  using type = Layer;
};
}  // namespace detail

/// Activation checkpointing as a wrapper: forward keeps nothing of the block but its input, and backward runs
/// the block's forward again, then its backward. Wraps one composite, or nn::chain<Layers...> otherwise.
template <class... Layers>
struct recomputed {
  static_assert(sizeof...(Layers) >= 1, "fusor: nn::recomputed needs a block (or layers) to recompute");
  /// The wrapped block: Layers when it is one composite, else nn::chain<Layers...>.
  using block = typename detail::recomputed_block<Layers...>::type;
  /// Whether features In can come in: whatever the block accepts.
  template <class In>
  static constexpr bool accepts = block::template accepts<In>;
  /// What the block wants, named in a size error.
  using expected_input = typename block::expected_input;
  /// The features that go out: the block's output for In.
  template <class In>
  using output = typename block::template output<In>;
  /// The rule on what comes in (nn/layer.hpp): the block's.
  template <class In>
  using input_rule = typename detail::input_rule_of<block, In>::type;

  /// The block's name followed by ", recomputed", for errors.
  static std::string name() { return block::name() + ", recomputed"; }

  /// The block's instance for input features In, the network's precision and memory Space.
  template <class In, class NetworkPrecision, class Space>
  using block_instance = typename block::template instance<In, NetworkPrecision, Space>;
  /// The wrapper bound to input features In, the network's precision and memory Space; holds the block's
  /// instance, whose kept memory lives in the wrapper's scratch.
  template <class In, class NetworkPrecision, class Space>
  class instance;
};

/// The wrapper bound to input features In, the network's precision and memory Space; holds the block's
/// instance, whose kept memory lives in the wrapper's scratch.
template <class... Layers>
template <class In, class NetworkPrecision, class Space>
class recomputed<Layers...>::instance
    : public detail::composite_shards<instance<In, NetworkPrecision, Space>, Space,
                                      std::tuple<block_instance<In, NetworkPrecision, Space>>>,
      public detail::input_precision_member<block_instance<In, NetworkPrecision, Space>> {
  using block_type = block_instance<In, NetworkPrecision, Space>;
  static_assert(detail::placed_memory<block_type>);

 public:
  /// The block's precision.
  using precision = typename block_type::precision;
  /// The block's input features.
  using input_features = typename block_type::input_features;
  /// The block's output features.
  using output_features = typename block_type::output_features;
  /// The block's input view (x and dx).
  using input_view = typename block_type::input_view;
  /// The block's output view (y and dy).
  using output_view = typename block_type::output_view;

  /// Kept from forward to backward, per sample: nothing.
  static constexpr index_t kept_bytes_per_sample = 0;
  /// What the block would keep without recompute (and now holds in scratch).
  static constexpr index_t recomputed_bytes_per_sample = block_type::kept_bytes_per_sample;
  /// Memory used only inside one forward or backward call, per sample: what the block keeps plus its scratch.
  static constexpr index_t scratch_bytes_per_sample =
      block_type::kept_bytes_per_sample + block_type::scratch_bytes_per_sample;
  /// The kept memory reserve() takes: none.
  static constexpr std::size_t kept_bytes(index_t) { return 0; }
  /// The scratch memory reserve(max_batch) takes, in bytes: the block's kept and scratch memory.
  static constexpr std::size_t scratch_bytes(index_t max_batch) {
    return block_type::kept_bytes(max_batch) + block_type::scratch_bytes(max_batch);
  }

  /// The block's name followed by ", recomputed", for errors.
  static std::string name() { return recomputed::name(); }
  /// The block's parameters, under the block's names (a checkpoint loads with or without recompute).
  static std::vector<parameter_spec> parameters() { return block_type::parameters(); }
  /// Binds the block's parameters.
  void bind(const parameter_binding<storage_t<precision>, Space>& binding) { block_.bind(binding); }
  /// Before reserve(): the memory an enclosing composite provides (nullptr: own it); only scratch is used.
  void place(std::byte* kept, std::byte* scratch) { memory_.place(kept, scratch); }
  /// Allocates the scratch memory not placed, for batches of up to max_batch, and places the block's kept and
  /// scratch memory in it.
  void reserve(index_t max_batch, stream_t stream) {
    memory_.reserve(0, scratch_bytes(max_batch), stream);
    std::byte* scratch = memory_.scratch().at;
    block_.place(scratch, scratch == nullptr ? nullptr : scratch + block_type::kept_bytes(max_batch));
    block_.reserve(max_batch, stream);
  }
  /// Seeds the block's random layers (dropout) with s.
  void seed(std::uint64_t s) { block_.seed(s); }

  /// The block's forward; remembers the mode, so the recomputation in backward draws the same values.
  template <class Executor>
  void forward(const input_view& x, const output_view& y, const run_mode& mode, const Executor& ex) {
    mode_ = mode;
    block_.forward(x, y, mode, ex);
  }
  /// The block's forward again (same inputs, same mode: the same values, y
  /// included), then its backward.
  template <class Executor>
  void backward(const input_view& x, const output_view& y, const output_view& dy, const input_view& dx,
                const Executor& ex) {
    block_.forward(x, y, mode_, ex);
    block_.backward(x, y, dy, dx, ex);
  }

  /// The block's instance.
  block_type& inner() { return block_; }
  /// fn(instance) for the block's instance, the wrapper's only inner layer.
  template <class Fn>
  void for_each_layer(Fn&& fn) {
    fn(block_);
  }

 private:
  block_type block_;
  detail::composite_memory<Space> memory_;
  run_mode mode_{};
};

/// recomputed<Layers...> is a composite: its layers are instantiated inside it.
template <class... Layers>
inline constexpr bool is_composite_v<recomputed<Layers...>> = true;

}  // namespace fusor::nn
