// fusor/nn/composite.hpp — what the composite layers share: nn::chain,
// nn::residual, nn::branches and nn::recomputed (nn/chain.hpp, residual.hpp,
// branches.hpp, recompute.hpp) are layers made of layers, usable anywhere a
// layer is (docs/layers.md, "Composites").
//
// A composite holds its inner layers' instances and the activations between
// them. Its memory is two blocks, both allocated in reserve() (or handed down
// by an enclosing composite, see place()):
//   kept     what forward keeps for backward (inner outputs), per sample
//            kept_bytes_per_sample;
//   scratch  what lives only inside one forward or backward call (inner
//            gradients, copies of dy), per sample scratch_bytes_per_sample.
// Siblings run one after the other, so they share one scratch block (the
// largest), and nn::recomputed puts its block's kept memory into scratch too:
// that is how activation checkpointing saves memory.
//
// Tensor parallelism: a composite holding split layers (nn/sharding.hpp) is
// itself a split layer: shard_ways (all its split layers must agree),
// connect/disconnect (forwarded to each), shard_index; its parameter specs
// keep their sharding, so network::initialize and parallel::tensor_parallel
// treat it as they treat an nn::linear split the same way.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/buffer.hpp"
#include "fusor/core/error.hpp"
#include "fusor/nn/network.hpp"
#include "fusor/nn/sharding.hpp"

namespace fusor::nn {

// Stands for "the composite's input" where a mismatch inside a composite names
// the layer before (layer_sizes_must_match's second argument).
struct composite_input {};

/// Whether a layer descriptor is a composite (chain, residual, branches, recomputed).
template <class Layer>
inline constexpr bool is_composite_v = false;

namespace detail {

// Each region of a composite's memory starts on a 256-byte boundary, as a
// fresh allocation does (vector loads, cuBLASLt's preferred alignment).
inline constexpr std::size_t region_alignment = 256;
constexpr std::size_t region_bytes(index_t bytes_per_sample, index_t max_batch) {
  const std::size_t bytes = std::size_t(bytes_per_sample) * std::size_t(max_batch);
  return (bytes + region_alignment - 1) / region_alignment * region_alignment;
}

// Bytes of one sample of an activation.
template <class Precision, class Features>
inline constexpr index_t activation_bytes = Features::size * index_t(sizeof(storage_t<Precision>));

// An inner instance that takes its memory from its parent (the composites do).
template <class Instance>
concept placed_memory = requires(Instance& instance, std::byte* p, index_t n) {
  { Instance::kept_bytes_per_sample } -> std::convertible_to<index_t>;
  { Instance::scratch_bytes_per_sample } -> std::convertible_to<index_t>;
  { Instance::kept_bytes(n) } -> std::convertible_to<std::size_t>;
  { Instance::scratch_bytes(n) } -> std::convertible_to<std::size_t>;
  instance.place(p, p);
};
template <class I>
constexpr index_t kept_per_sample() {
  if constexpr (placed_memory<I>) return I::kept_bytes_per_sample;
  else return 0;
}
template <class I>
constexpr index_t scratch_per_sample() {
  if constexpr (placed_memory<I>) return I::scratch_bytes_per_sample;
  else return 0;
}
template <class I>
constexpr std::size_t kept_bytes_of(index_t max_batch) {
  if constexpr (placed_memory<I>) return I::kept_bytes(max_batch);
  else return 0;
}
template <class I>
constexpr std::size_t scratch_bytes_of(index_t max_batch) {
  if constexpr (placed_memory<I>) return I::scratch_bytes(max_batch);
  else return 0;
}

// Sums and maxima of the above over a std::tuple of inner instances.
template <class Tuple>
struct inner_memory;
template <class... Inner>
struct inner_memory<std::tuple<Inner...>> {
  static constexpr index_t kept_per_sample = (index_t(0) + ... + detail::kept_per_sample<Inner>());
  static constexpr index_t scratch_per_sample = std::max({index_t(0), detail::scratch_per_sample<Inner>()...});
  static constexpr std::size_t kept_bytes(index_t n) { return (std::size_t(0) + ... + kept_bytes_of<Inner>(n)); }
  static constexpr std::size_t scratch_bytes(index_t n) {
    return std::max({std::size_t(0), scratch_bytes_of<Inner>(n)...});
  }
};

// Hands out consecutive regions of a block.
struct region_cursor {
  std::byte* at;
  std::byte* take(std::size_t bytes) {
    std::byte* p = at;
    if (at != nullptr) at += bytes;
    return p;
  }
};

// A composite's kept and scratch blocks: placed by its parent, or owned.
template <class Space>
class composite_memory {
 public:
  void place(std::byte* kept, std::byte* scratch) {
    kept_ = kept;
    scratch_ = scratch;
  }
  // Allocates what was not placed.
  void reserve(std::size_t kept_bytes, std::size_t scratch_bytes, stream_t stream) {
    if (kept_ == nullptr && kept_bytes > 0) {
      owned_kept_ = buffer<Space>(kept_bytes, stream);
      kept_ = owned_kept_.template as<std::byte>();
    }
    if (scratch_ == nullptr && scratch_bytes > 0) {
      owned_scratch_ = buffer<Space>(scratch_bytes, stream);
      scratch_ = owned_scratch_.template as<std::byte>();
    }
  }
  region_cursor kept() const { return {kept_}; }
  region_cursor scratch() const { return {scratch_}; }

 private:
  std::byte* kept_ = nullptr;
  std::byte* scratch_ = nullptr;
  buffer<Space> owned_kept_, owned_scratch_;
};

// An activation view over a region.
template <class Precision, class Features, class Space>
activation_view<Precision, Features, Space> activation_at(std::byte* region, index_t batch) {
  return {reinterpret_cast<storage_t<Precision>*>(region), batch};
}

// reserve() of one inner instance, placing a composite's memory first.
template <class Inner>
void reserve_inner(Inner& inner, region_cursor& kept, std::byte* shared_scratch, index_t max_batch, stream_t stream) {
  if constexpr (placed_memory<Inner>) inner.place(kept.take(Inner::kept_bytes(max_batch)), shared_scratch);
  inner.reserve(max_batch, stream);
}

// fn.template operator()<I>() for I in [0, N).
template <std::size_t N, class Fn>
void for_each_index(Fn&& fn) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (fn.template operator()<I>(), ...);
  }(std::make_index_sequence<N>{});
}

// The inner instances' specs, each name prefixed by its inner position ("1.weight"),
// as PyTorch names the modules nested in an nn.Sequential.
template <class Tuple>
struct prefixed_parameters;
template <class... Inner>
struct prefixed_parameters<std::tuple<Inner...>> {
  static std::vector<parameter_spec> get();
};
template <class... Inner>
std::vector<parameter_spec> prefixed_parameters<std::tuple<Inner...>>::get() {
  std::vector<parameter_spec> all;
  std::size_t position = 0;
  const auto append = [&](std::vector<parameter_spec> specs) {
    for (parameter_spec& spec : specs) {
      spec.name = std::to_string(position) + "." + spec.name;
      all.push_back(std::move(spec));
    }
    ++position;
  };
  (append(Inner::parameters()), ...);
  return all;
}

// Splits a binding among the inner instances, in order of their specs.
template <class Element, class Space, class... Inner>
void bind_inner(std::tuple<Inner...>& inner, const parameter_binding<Element, Space>& binding) {
  std::size_t next = 0;
  const auto bind_one = [&](auto& layer) {
    const std::size_t count = std::remove_cvref_t<decltype(layer)>::parameters().size();
    if (next + count > binding.values.size() || next + count > binding.gradients.size())
      throw error("fusor::nn: a composite layer was bound to " + std::to_string(binding.values.size()) +
                  " parameters; its inner layers have more");
    parameter_binding<Element, Space> part;
    const auto first = std::ptrdiff_t(next), last = std::ptrdiff_t(next + count);
    part.values.assign(binding.values.begin() + first, binding.values.begin() + last);
    part.gradients.assign(binding.gradients.begin() + first, binding.gradients.begin() + last);
    layer.bind(part);
    next += count;
  };
  std::apply([&](auto&... layer) { (bind_one(layer), ...); }, inner);
  if (next != binding.values.size())
    throw error("fusor::nn: a composite layer was bound to " + std::to_string(binding.values.size()) +
                " parameters; its inner layers have " + std::to_string(next));
}

// Seeds derived from the composite's, one per inner position, for the inner
// layers that take one (dropout).
template <class... Inner>
void seed_inner(std::tuple<Inner...>& inner, std::uint64_t seed) {
  for_each_index<sizeof...(Inner)>([&]<std::size_t I>() {
    auto& layer = std::get<I>(inner);
    if constexpr (requires { layer.seed(std::uint64_t{}); }) layer.seed(derive_seed(seed, I));
  });
}

// Every inner instance stores the composite's element type.
template <class Precision, class... Inner>
constexpr bool inner_storage_matches() {
  constexpr bool match = (std::is_same_v<storage_t<typename Inner::precision>, storage_t<Precision>> && ...);
  static_assert(match,
                "fusor: nn: the layers inside a composite (chain, residual, branches, recomputed) store activations "
                "in the network's element type: an inner layer's precision policy differs in storage (e.g. "
                "nn::precision<bf16> inside an fp32 network)");
  return match;
}

// ---- tensor parallelism through composites ----------------------------------

// A layer instance split across ranks (what parallel::tensor_parallel connects).
template <class Instance, class Space>
concept split_instance = requires(Instance& layer, shard_group<Space>& group) {
  layer.connect(group);
  layer.disconnect();
  { Instance::shard_ways } -> std::convertible_to<int>;
};

template <class Space, class Tuple>
struct split_inner;
template <class Space, class... Inner>
struct split_inner<Space, std::tuple<Inner...>> {
  static constexpr bool any = (split_instance<Inner, Space> || ...);
  template <class I>
  static constexpr int ways_of() {
    if constexpr (split_instance<I, Space>) return int(I::shard_ways);
    else return 0;
  }
  static constexpr int ways = std::max({0, ways_of<Inner>()...});
  static constexpr bool agree = ((ways_of<Inner>() == 0 || ways_of<Inner>() == ways) && ...);
};

template <bool Split, int Ways>
struct shard_ways_member {};
template <int Ways>
struct shard_ways_member<true, Ways> {
  // How many ways the split layers inside are split.
  static constexpr int shard_ways = Ways;
};

// The members of a composite that holds split layers, forwarded to each of
// them. Derived has for_each_layer(fn) over its direct inner instances.
template <class Derived, class Space, class Tuple>
class composite_shards
    : public shard_ways_member<split_inner<Space, Tuple>::any, split_inner<Space, Tuple>::ways> {
  using split = split_inner<Space, Tuple>;
  static_assert(split::agree,
                "fusor: nn: the split layers inside one composite must be split the same number of ways (one "
                "tensor-parallel group)");

 public:
  /// Whether an inner layer draws random numbers (dropout): only then must a resumed run have the same seed.
  static constexpr bool draws_random_numbers = []<class... Inner>(std::type_identity<std::tuple<Inner...>>) {
    return (layer_draws_random_numbers<Inner>() || ...);
  }(std::type_identity<Tuple>{});

  void connect(shard_group<Space>& group)
    requires split::any
  {
    each_split([&](auto& layer) { layer.connect(group); });
  }
  void disconnect()
    requires split::any
  {
    each_split([](auto& layer) { layer.disconnect(); });
  }
  bool connected() const
    requires split::any
  {
    bool all = true;
    each_split([&](auto& layer) { all = all && layer.connected(); });
    return all;
  }
  // This rank's slice (the group's rank; 0 before connect).
  int shard_index() const
    requires split::any
  {
    int index = 0;
    each_split([&](auto& layer) { index = layer.shard_index(); });
    return index;
  }

 private:
  template <class Fn>
  void each_split(Fn&& fn) const {
    const_cast<Derived&>(static_cast<const Derived&>(*this)).for_each_layer([&](auto& layer) {
      if constexpr (split_instance<std::remove_cvref_t<decltype(layer)>, Space>) fn(layer);
    });
  }
};

// An instance's input precision: input_precision where the first inner layer
// names one (an embedding first in a chain), else the composite's precision.
template <class Inner, class Precision>
struct composite_input_precision {
  using type = Precision;
};
template <class Inner, class Precision>
  requires requires { typename Inner::input_precision; }
struct composite_input_precision<Inner, Precision> {
  using type = typename Inner::input_precision;
};
template <class Inner>
struct input_precision_member {};
template <class Inner>
  requires requires { typename Inner::input_precision; }
struct input_precision_member<Inner> {
  using input_precision = typename Inner::input_precision;
};

}  // namespace detail
}  // namespace fusor::nn
