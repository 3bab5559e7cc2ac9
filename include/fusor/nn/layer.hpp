// fusor/nn/layer.hpp — what a layer is, for sequential<> and for anyone writing one
// (docs/layers.md: the protocol in full, with a user's SwiGLU layer).
//
// A layer is a class template whose arguments say what it computes (sizes, an
// activation) and which policies it takes (nn/policies.hpp). It is a
// descriptor: sequential<> binds it to the features it receives, the network's
// precision and a memory space, and builds the nested class that holds state:
//
//   struct my_layer {
//     template <class In> static constexpr bool accepts = ...;  // whether In can come in
//     using expected_input = features<...>;                      // what it wants (for the error)
//     template <class In> using output = features<...>;          // what goes out, given In
//     template <class In, class NetworkPrecision, class Space>
//     class instance {
//       using precision = ...;                                   // its activations' precision
//       using input_features = In; using output_features = ...;  // what network.hpp reads
//       static std::vector<parameter_spec> parameters();         // may be empty
//       void bind(const parameter_binding<storage_t<precision>, Space>&);
//       void reserve(index_t max_batch, stream_t);               // allocate what forward saves
//       void forward(x, y, const run_mode&, const Executor&);    // y = f(x)
//       void backward(x, y, dy, dx, const Executor&);            // parameter gradients, and dx
//     };                                                          // (dx.data() == nullptr: not needed)
//   };
//
// Optional members of an instance: `using input_precision = ...;` where x is
// not in `precision` (an embedding's int32 token ids; the network's first layer
// only), and `void seed(std::uint64_t)`, which the network calls once with a
// seed derived from its own and the layer's position (dropout's masks).
//
// x, y, dy, dx are activation_view<precision, features, Space> with the
// batch as the leading extent. backward may overwrite dy (it is the network's
// scratch for this layer's output). A layer allocates in reserve() only, so a
// training step allocates nothing.
#pragma once

#include <cstdint>
#include <type_traits>

#include "fusor/core/extents.hpp"
#include "fusor/nn/features.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/nn/policies.hpp"

namespace fusor::nn {

/// How forward runs: training (dropout drops, masks are drawn from `step`) or
/// evaluation. `step` is on the host for the host executor; a CUDA graph replays
/// whatever value it captured, so layers that need a fresh draw per replay read
/// `device_step` (a device counter the trainer advances) when it is set.
struct run_mode {
  /// True in training (dropout drops elements); false in evaluation (dropout passes x through).
  bool training = true;
  /// The training step that per-step random draws (dropout's masks) follow, used while `device_step` is null.
  std::uint64_t step = 0;
  /// Where to read the step in place of `step` (null: use `step`). It must point into memory the executor reads: host
  /// memory for the host executor, device memory for the cuda executor.
  const std::int64_t* device_step = nullptr;
  /// Where this batch's first sample lies in the step's whole batch (a data-parallel
  /// rank's rows, a micro-batch): random choices per sample (dropout) follow the
  /// sample's place in the whole batch, so a split step draws what one process does.
  index_t first_sample = 0;
};
/// A run_mode for training at step 0, with no device step.
inline constexpr run_mode training{true};
/// A run_mode for evaluation: dropout passes x through.
inline constexpr run_mode evaluation{false};

/// The instance of layer descriptor Layer given its input features In, the network's precision and a memory Space.
template <class Layer, class In, class NetworkPrecision, class Space>
using layer_instance = typename Layer::template instance<In, NetworkPrecision, Space>;

namespace detail {
template <class Instance>
struct input_precision_of {
  using type = typename Instance::precision;
};
template <class Instance>
  requires requires { typename Instance::input_precision; }
struct input_precision_of<Instance> {
  using type = typename Instance::input_precision;
};
}  // namespace detail

/// The precision of a layer instance's input x: its input_precision if it names one.
template <class Instance>
using layer_input_precision = typename detail::input_precision_of<Instance>::type;

/// The message of a failed layer_sizes_must_match (one string literal, for static_assert).
#define FUSOR_LAYER_SIZES_MESSAGE                                                                                   \
  "fusor: nn::sequential (or a composite): a layer's input does not match the previous layer's output; make the " \
  "layer take the features the previous one makes (e.g. nn::linear<784, N> after nn::features<784>); see "        \
  "layer_sizes_must_match<position, previous layer, layer, features produced, features expected>"

/// Names a junction between two layers in the compiler's message: nn::sequential checks each with
/// `static_assert(layer_sizes_must_match<...>::value, "fusor: ...")`, so the failing condition names the position,
/// both layers and both features, and the message says what to do. A composite's inner junction is also its
/// input rule (below): check() is the same error, raised at nn::network's constructor.
template <std::size_t Position, class PreviousLayer, class Layer, class Produced, class Expected, bool Match>
struct layer_sizes_must_match {
  /// Whether the layer accepts the features the previous one makes.
  static constexpr bool value = Match;
  /// Fails to compile when it does not.
  static constexpr void check() { static_assert(layer_sizes_must_match::value, FUSOR_LAYER_SIZES_MESSAGE); }
};

/// The input rule of a layer that has none beyond its input size: always passes.
struct no_input_rule {
  /// Passes.
  static constexpr bool value = true;
  /// Nothing to check.
  static constexpr void check() {}
};

namespace detail {
// Layer::input_rule<F> where the layer declares one (a rule on the features it gets beyond their size, e.g.
// nn::max_pool2d's window must fit the image), else no_input_rule. A rule is a trait with `value` (no error of its
// own) and a constexpr check() whose static_assert says what to fix; nn::network's constructors call the first
// failing rule's check(), so the mistake is one short error at the caller's line.
template <class Layer, class F, class = void>
struct input_rule_of {
  using type = no_input_rule;
};
template <class Layer, class F>
struct input_rule_of<Layer, F, std::void_t<typename Layer::template input_rule<F>>> {
  using type = typename Layer::template input_rule<F>;
};
// The first of Rules whose value is false, else no_input_rule (a composite of several parts: nn::branches).
template <class... Rules>
struct first_failing_rule {
  using type = no_input_rule;
};
template <class Rule, class... Rest>
struct first_failing_rule<Rule, Rest...> {
  using type = std::conditional_t<Rule::value, typename first_failing_rule<Rest...>::type, Rule>;
};
}  // namespace detail

}  // namespace fusor::nn
