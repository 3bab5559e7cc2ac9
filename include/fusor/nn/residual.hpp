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

// Compile-time error for a residual whose chain changes the features: the
// failing instantiation names what comes in and what the chain gives.
template <class Input, class BlockOutput, bool Match>
struct residual_features_must_match {
  static_assert(Match,
                "fusor: nn::residual: the layers inside must give back the features they get (y = x + f(x)); see "
                "residual_features_must_match<input features, features the inner layers give>");
  using type = Input;
};

template <class... Layers>
struct residual {
  using block = chain<Layers...>;
  template <class In>
  static constexpr bool accepts = block::template accepts<In>;
  using expected_input = typename block::expected_input;
  template <class In>
  using output = typename residual_features_must_match<In, typename block::template output<In>,
                                                       std::is_same_v<In, typename block::template output<In>>>::type;

  static std::string name() { return "nn::residual of " + std::to_string(sizeof...(Layers)) + " layers"; }

  template <class In, class NetworkPrecision, class Space>
  using block_instance = typename block::template instance<In, NetworkPrecision, Space>;
  template <class In, class NetworkPrecision, class Space>
  class instance;
};

template <class... Layers>
template <class In, class NetworkPrecision, class Space>
class residual<Layers...>::instance
    : public detail::composite_shards<instance<In, NetworkPrecision, Space>, Space,
                                      std::tuple<block_instance<In, NetworkPrecision, Space>>> {
  using block_type = block_instance<In, NetworkPrecision, Space>;

 public:
  using precision = NetworkPrecision;
  using input_features = In;
  using output_features = output<In>;
  using activation = activation_view<precision, In, Space>;
  using input_view = activation;
  using output_view = activation;
  static_assert(std::is_same_v<layer_input_precision<block_type>, precision>,
                "fusor: nn::residual: the first layer inside takes the residual's input, in the network's precision "
                "(an embedding cannot start a residual)");

  // Activations kept from forward to backward, per sample: the chain's output and what it keeps.
  static constexpr index_t activation_bytes = detail::activation_bytes<precision, In>;  // one sample of x
  static constexpr index_t kept_bytes_per_sample = activation_bytes + block_type::kept_bytes_per_sample;
  static constexpr index_t scratch_bytes_per_sample = activation_bytes + block_type::scratch_bytes_per_sample;
  static constexpr std::size_t kept_bytes(index_t max_batch) {
    return detail::region_bytes(activation_bytes, max_batch) + block_type::kept_bytes(max_batch);
  }
  static constexpr std::size_t scratch_bytes(index_t max_batch) {
    return detail::region_bytes(activation_bytes, max_batch) + block_type::scratch_bytes(max_batch);
  }

  static std::string name() { return residual::name(); }
  static std::vector<parameter_spec> parameters() { return block_type::parameters(); }
  void bind(const parameter_binding<storage_t<precision>, Space>& binding) { block_.bind(binding); }
  void place(std::byte* kept, std::byte* scratch) { memory_.place(kept, scratch); }
  void reserve(index_t max_batch, stream_t stream) {
    memory_.reserve(kept_bytes(max_batch), scratch_bytes(max_batch), stream);
    detail::region_cursor kept = memory_.kept(), scratch = memory_.scratch();
    block_output_ = kept.take(detail::region_bytes(activation_bytes, max_batch));
    dy_copy_ = scratch.take(detail::region_bytes(activation_bytes, max_batch));
    detail::reserve_inner(block_, kept, scratch.at, max_batch, stream);
  }
  void seed(std::uint64_t s) { block_.seed(derive_seed(s, 0)); }

  template <class Executor>
  void forward(const activation& x, const activation& y, const run_mode& mode, const Executor& ex) {
    const activation f = at(block_output_, x.extent(0));
    block_.forward(x, f, mode, ex);
    assign(y, x + f, ex);
  }
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

  // The chain's instance.
  block_type& inner() { return block_; }
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

template <class... Layers>
inline constexpr bool is_composite_v<residual<Layers...>> = true;

}  // namespace fusor::nn
