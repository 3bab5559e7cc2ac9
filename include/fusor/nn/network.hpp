// fusor/nn/network.hpp — the state of a sequential<> network: its layers, the
// activations forward keeps for backward, and its parameters in one flat buffer
// per element type (nn/parameters.hpp).
//
//   nn::network<mlp, fs::fp32, fs::device_space> net(256, {.seed = 1, .stream = s});
//   auto logits = net.forward(images, ex);           // [batch, 10], kept for backward
//   loss.forward_backward(logits, labels, net.output_gradient(), ex);  // nn/loss.hpp writes dlogits there
//   net.backward(ex);                                 // every parameter's gradient
//   net.for_each_group([&](auto& group) { optimizer.step(group.values(), group.gradients(), ...); });
//
// Everything a step touches is allocated in the constructor for `max_batch`
// samples; forward and backward allocate nothing (batches up to max_batch).
// Parameters are named as PyTorch names those of nn.Sequential: "<layer
// index>.<name>", e.g. "0.weight", so a checkpoint loads into the same model there.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/stream_binding.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/nn/network_passes.hpp"
#include "fusor/nn/parameter_directory.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/nn/random.hpp"
#include "fusor/nn/sequential.hpp"

namespace fusor::nn {

/// Layers [first, last) of the sequential: a pipeline stage holds only its own.
struct layer_range {
  /// The first layer held.
  std::size_t first = 0;
  std::size_t last = std::size_t(-1);  ///< past the end: every layer from first on
};

/// How a network is built: the seed of its initial parameters, the stream it allocates on, its layer range.
struct network_options {
  std::uint64_t seed = 0;  ///< initial parameters are a function of this alone
  stream_t stream = {};    ///< where device memory is allocated, zeroed and freed; an executor
                           ///< on another stream is ordered after it by events (core/stream_binding.hpp)
  /// The layers this network holds (a pipeline stage's); by default every layer.
  layer_range layers = {};
};

/// The message of a network (or its input) in memory the executor cannot reach (one string literal, for
/// static_assert).
#define FUSOR_NETWORK_MEMORY_MESSAGE                                                                                \
  "fusor: nn::network: the executor cannot reach the network's memory (or its input's): run a device_space "       \
  "network and input on the cuda executor and a host_space one on the host executor (the network's third "        \
  "argument is its memory space)"

/// The message of a network whose last layer is column-parallel, given to a loss (one string literal).
#define FUSOR_SPLIT_OUTPUT_MESSAGE                                                                                \
  "fusor: the network's last layer is column-parallel: each rank would hold a slice of the logits, and the loss "  \
  "needs all of them; make the last layer row_parallel (after a column_parallel one) or leave it unsplit"

namespace detail {
// The memory space of X, a view or a tensor.
template <class X>
using space_of_t = typename std::remove_cvref_t<decltype(as_view(std::declval<const X&>()))>::space;

// Whether a layer leaves each rank a slice of its output (a column-parallel linear).
template <class Layer>
consteval bool layer_splits_output() {
  if constexpr (requires { Layer::splits_output; }) return Layer::splits_output;
  else return false;
}

// Whether a layer draws random numbers by the seed the network gives it (dropout). A composite (chain,
// residual, branches, recomputed) takes a seed to pass on, and says in `draws_random_numbers` whether an inner
// layer uses it; any other layer does when it takes a seed.
template <class Layer>
consteval bool layer_draws_random_numbers() {
  if constexpr (requires { Layer::draws_random_numbers; }) return Layer::draws_random_numbers;
  else return requires(Layer& l) { l.seed(std::uint64_t{}); };
}

template <class List, class... Seen>
struct unique_types;
template <class... Seen>
struct unique_types<type_list<>, Seen...> {
  using type = type_list<Seen...>;
};
template <class T, class... Rest, class... Seen>
struct unique_types<type_list<T, Rest...>, Seen...> {
  using type = std::conditional_t<(std::is_same_v<T, Seen> || ...), typename unique_types<type_list<Rest...>, Seen...>::type,
                                  typename unique_types<type_list<Rest...>, Seen..., T>::type>;
};
template <class Space, class List>
struct group_tuple;
template <class Space, class... E>
struct group_tuple<Space, type_list<E...>> {
  using type = std::tuple<parameter_group<E, Space>...>;
};

// The same memory seen with another precision policy of the same storage (fp32 <-> tf32).
template <class P, class V>
auto with_precision(const V& v) {
  static_assert(std::is_same_v<storage_t<P>, typename V::element_type>,
                "fusor: nn: adjacent layers must store activations in the same element type (their precision "
                "policies differ in storage)");
  return view<P, typename V::extents_type, typename V::layout_type, typename V::space>(v.data(), v.mapping());
}
}  // namespace detail

/// The state of a sequential<> network in Precision and memory Space: its layers, the activations forward keeps
/// for backward, and its parameters in one flat buffer per element type; forward and backward allocate nothing.
template <class Sequential, class Precision = fp32, class Space = host_space>
class network {
  static_assert(is_sequential_v<Sequential>, "fusor: nn::network's first argument is an nn::sequential<...>");
  // The sequential's parts, read without instantiating it: a layer size mismatch is then one static_assert, in
  // the constructors below, where the caller's line is.
  using parts = detail::sequential_parts<Sequential>;

 public:
  /// A std::tuple of every layer's instance, in order.
  using layers_type = typename parts::template instances<Precision, Space>;
  /// The number of layers of the sequential (held or not).
  static constexpr std::size_t depth = parts::depth;
  /// Layer I's instance type.
  template <std::size_t I>
  using layer_type = std::tuple_element_t<I, layers_type>;
  /// What one sample of the input is.
  using input_features = typename parts::input_features;
  /// What one sample of the output is.
  using output_features = typename parts::output_features;
  /// Whether the last layer leaves each rank a slice of the output (column-parallel): no loss can take it.
  static constexpr bool output_split = detail::layer_splits_output<layer_type<depth - 1>>();
  /// The precision of the input x: the first layer's input precision.
  using input_precision = layer_input_precision<layer_type<0>>;  // int32 for an embedding
  /// The precision of the output: the last layer's.
  using output_precision = typename layer_type<depth - 1>::precision;
  /// The input (and its gradient), [batch, input features...] in Space.
  using input_view = activation_view<input_precision, input_features, Space>;
  /// The output (and its gradient), [batch, output features...] in Space.
  using output_view = activation_view<output_precision, output_features, Space>;
  /// The memory space of the network's state.
  using space = Space;

 private:
  template <std::size_t I>
  using output_tensor = tensor<typename layer_type<I>::precision, typename layer_type<I>::output_features::batched_extents,
                               row_major, Space>;
  template <class Seq>
  struct activation_tuple;
  template <std::size_t... I>
  struct activation_tuple<std::index_sequence<I...>> {
    using type = std::tuple<output_tensor<I>...>;
    using elements = detail::type_list<storage_t<typename layer_type<I>::precision>...>;
  };
  using indices = std::make_index_sequence<depth>;
  using activations_type = typename activation_tuple<indices>::type;

 public:
  /// The element types of the parameter groups, in order (a detail::type_list).
  using group_elements = typename detail::unique_types<typename activation_tuple<indices>::elements>::type;
  /// A std::tuple of parameter_group<E, Space>, one per element type of group_elements.
  using groups_type = typename detail::group_tuple<Space, group_elements>::type;

  /// Allocates everything a step touches for batches of up to max_batch samples and draws the parameters from
  /// options.seed. Throws fusor::error for max_batch < 1, an empty layer range or a bad weight tie.
  explicit network(index_t max_batch, network_options options = {}) : network(max_batch, options, nullptr) {
    static_assert(parts::chain::mismatch::value, FUSOR_LAYER_SIZES_MESSAGE);
    parts::chain::rule_failure::check();  // a layer's own rule on its input (layer.hpp's input_rule)
  }
  /// A network over `shared`'s parameters and gradients (same layers and range):
  /// its own activations, so several batches can be in flight at once (a pipeline
  /// stage's micro-batches). Backward writes the shared gradients. `shared` must
  /// outlive it.
  network(index_t max_batch, network_options options, const network& shared) : network(max_batch, options, &shared) {
    static_assert(parts::chain::mismatch::value, FUSOR_LAYER_SIZES_MESSAGE);
    parts::chain::rule_failure::check();  // a layer's own rule on its input (layer.hpp's input_rule)
  }
  network(const network&) = delete;
  network& operator=(const network&) = delete;

  /// Draws every parameter afresh from `seed` (the same seed gives the same values
  /// anywhere; a layer range or a sharded layer gets its part of the same values).
  void initialize(std::uint64_t seed) {
    seed_ = seed;
    const std::vector<int> shard_of_layer = shard_of_layers();
    for_each_group([&](auto& group) {
      using element = typename std::remove_cvref_t<decltype(group)>::element_type;
      std::vector<element> host(static_cast<std::size_t>(group.size()), convert<element>(0.0f));
      for (const parameter_slot& slot : group.slots()) {
        const std::size_t id = directory_.id(slot.name);
        initialize_parameter(host.data() + slot.offset, directory_.spec(id), derive_seed(seed, id),
                             shard_of_layer[directory_.layer(id)]);
      }
      copy(group.values(), flat_view<element, host_space>(host.data(), group.size()));
    });
  }
  /// The seed of the last initialize (the constructor's by default).
  std::uint64_t seed() const { return seed_; }
  /// The layers this network holds: [first, last).
  layer_range layers() const { return {first_, last_}; }

  /// y = network(x). x: a batch of samples, [batch, features...] or any contiguous
  /// row-major view whose elements are batch * features (the batch is its first
  /// extent); another element type is converted in one pass. x must stay valid
  /// until backward(), which reads it.
  /// A stage without the last layer returns an empty view (see with_stage_output).
  template <class X, class Executor>
  output_view forward(const X& x, const Executor& ex, const run_mode& mode = training) {
    static_assert(executor_reaches_v<Executor, Space> && executor_reaches_v<Executor, detail::space_of_t<X>>,
                  FUSOR_NETWORK_MEMORY_MESSAGE);
    // After a failed check, nothing deeper is instantiated: one error, not one per layer.
    if constexpr (executor_reaches_v<Executor, Space> && executor_reaches_v<Executor, detail::space_of_t<X>>)
      return forward(x, ex, mode, [](std::size_t) {});
    else
      return output_view{};
  }
  /// The same, calling before_layer(I) just before layer I runs: ZeRO-3 gathers
  /// a bucket's parameters there (and starts gathering the next).
  template <class X, class Executor, class BeforeLayer>
  output_view forward(const X& x, const Executor& ex, const run_mode& mode, BeforeLayer&& before_layer) {
    static_assert(executor_reaches_v<Executor, Space> && executor_reaches_v<Executor, detail::space_of_t<X>>,
                  FUSOR_NETWORK_MEMORY_MESSAGE);
    if (first_ != 0)
      throw error("fusor::nn::network::forward: this network holds layers from " + std::to_string(first_) +
                  " on; fill with_stage_input and call forward_stage");
    if constexpr (executor_reaches_v<Executor, Space> && executor_reaches_v<Executor, detail::space_of_t<X>>) {
      const auto& xv = as_view(x);
      bind_input(xv, ex);
      run_layers(ex, mode, before_layer);
    }
    return last_ == depth ? output<depth - 1>() : output_view{};
  }

  /// Where the loss writes the gradient of the output, for the last forward's batch.
  output_view output_gradient() const {
    require_last_layer("output_gradient");
    return output_gradient_of<depth - 1>();
  }
  /// The output of the last forward.
  output_view output() const {
    require_last_layer("output");
    return output<depth - 1>();
  }

  /// A pipeline stage (options.layers) moves its activations as flat arrays: fn(flat view) to fill with the
  /// stage's input (batch samples of layer `first`'s input), then forward_stage(ex, mode).
  /// fn receives a flat_view<Element, Space> of batch x features elements; a batch outside [1, max_batch]
  /// throws shape_error.
  template <class Fn>
  void with_stage_input(index_t batch, Fn&& fn) {
    if (batch < 1 || batch > max_batch_)
      throw shape_error("fusor::nn::network::with_stage_input: a batch of " + std::to_string(batch) +
                        ", where the network takes 1 to " + std::to_string(max_batch_) + " (the batch it was built for)");
    batch_ = batch;
    if (first_ == 0) {
      input_ = input_view(input_buffer_.data(), batch);
      fn(flat_view<storage_t<input_precision>, Space>(input_buffer_.data(), batch * input_features::size));
    } else {
      visit_activation(first_ - 1, activations_, std::forward<Fn>(fn));
    }
  }
  /// Runs the stage's layers on the input filled by with_stage_input (fusor::error before it).
  template <class Executor>
  void forward_stage(const Executor& ex, const run_mode& mode = training) {
    static_assert(executor_reaches_v<Executor, Space>, FUSOR_NETWORK_MEMORY_MESSAGE);
    if (batch_ == 0) throw error("fusor::nn::network::forward_stage: fill with_stage_input first");
    if constexpr (executor_reaches_v<Executor, Space>) run_layers(ex, mode);
  }
  /// fn(flat view) of the last forward's output of layer last - 1, to send on.
  template <class Fn>
  void with_stage_output(Fn&& fn) {
    visit_activation(last_ - 1, activations_, std::forward<Fn>(fn));
  }
  /// fn(flat view) to fill with the gradient of that output before backward(ex).
  template <class Fn>
  void with_stage_output_gradient(Fn&& fn) {
    visit_activation(last_ - 1, output_gradients_, std::forward<Fn>(fn));
  }
  /// After backward(ex): fn(flat view) of the gradient of the stage's input
  /// (stages after the first), to send back; fusor::error on the first stage.
  template <class Fn>
  void with_stage_input_gradient(Fn&& fn) {
    if (first_ == 0)
      throw error("fusor::nn::network::with_stage_input_gradient: the first stage's input gradient is backward's "
                  "input_gradient argument");
    visit_activation(first_ - 1, output_gradients_, std::forward<Fn>(fn));
  }
  /// The samples of the last forward (or with_stage_input); 0 before any.
  index_t batch() const { return batch_; }
  /// The most samples a batch may have, as constructed.
  index_t max_batch() const { return max_batch_; }

  /// Every parameter's gradient from output_gradient() (overwritten, not accumulated).
  template <class Executor>
  void backward(const Executor& ex) {
    static_assert(executor_reaches_v<Executor, Space>, FUSOR_NETWORK_MEMORY_MESSAGE);
    if constexpr (executor_reaches_v<Executor, Space>) backward(ex, input_view{});
  }
  /// The same, and the gradient of the input into input_gradient ([batch, features...]
  /// of the input precision): what a pipeline stage sends to the one before it.
  template <class Executor>
  void backward(const Executor& ex, const input_view& input_gradient) {
    static_assert(executor_reaches_v<Executor, Space>, FUSOR_NETWORK_MEMORY_MESSAGE);
    if constexpr (executor_reaches_v<Executor, Space>) backward(ex, input_gradient, [](std::size_t) {});
  }
  /// The same, calling layer_done(I) as soon as layer I's parameter gradients are
  /// written (layers in reverse order): data parallelism starts communicating a
  /// bucket of gradients there while the layers before it are still working.
  template <class Executor, class LayerDone>
  void backward(const Executor& ex, const input_view& input_gradient, LayerDone&& layer_done) {
    static_assert(executor_reaches_v<Executor, Space>, FUSOR_NETWORK_MEMORY_MESSAGE);
    if (batch_ == 0) throw error("fusor::nn::network::backward: call forward first");
    if (input_gradient.data() != nullptr && input_gradient.extent(0) != batch_)
      throw shape_error("fusor::nn::network::backward: input gradient of shape " +
                        shape_string(input_gradient.extents()) + " for a batch of " + std::to_string(batch_));
    input_gradient_ = input_gradient;
    streams_.use_on(executor_stream(ex));
    if constexpr (executor_reaches_v<Executor, Space>) backward_from<depth - 1>(ex, layer_done);
  }

  /// Layer I's instance.
  template <std::size_t I>
  layer_type<I>& layer() { return std::get<I>(layers_); }
  /// fn(layer) for every layer instance, in order (e.g. to connect tensor-parallel
  /// layers to their communicator).
  template <class Fn>
  void for_each_layer(Fn&& fn) {
    for_each_index([&]<std::size_t I>() { fn(std::get<I>(layers_)); });
  }

  /// Where layer `layer`'s parameters lie in the flat buffers of group<Element>():
  /// [begin, end) offsets (begin == end where it has none of that type). A layer's
  /// parameters are contiguous and layers follow each other in order.
  template <class Element>
  std::pair<index_t, index_t> parameter_range(std::size_t layer) const {
    const std::string prefix = std::to_string(layer) + ".";
    index_t begin = -1, end = -1;
    for (const parameter_slot& slot : std::get<parameter_group<Element, Space>>(groups_).slots())
      if (slot.name.starts_with(prefix)) {
        if (begin < 0) begin = slot.offset;
        end = slot.offset + slot.size;
      }
    if (begin < 0) return {0, 0};
    return {begin, (end + parameter_alignment - 1) / parameter_alignment * parameter_alignment};
  }

  /// Layers lowest..highest take their parameters' views again from their
  /// groups: after parameter_group::lend_gradients or lend_values moved them (ZeRO-2/3).
  void rebind_layers(std::size_t lowest, std::size_t highest) {
    for_each_index([&]<std::size_t I>() {
      bool in_range = lowest == 0;  // layer 0 (spelled so: nvcc warns of "0 >= lowest")
      if constexpr (I > 0) in_range = I >= lowest && I <= highest;
      if (in_range && holds(I)) bind_layer<I>();
    });
  }

  /// fn(parameter_group<E, Space>&) for each element type E the parameters use.
  template <class Fn>
  void for_each_group(Fn&& fn) {
    std::apply([&](auto&... group) { (fn(group), ...); }, groups_);
  }
  /// fn(const parameter_group<E, Space>&) for each element type E the parameters use.
  template <class Fn>
  void for_each_group(Fn&& fn) const {
    std::apply([&](const auto&... group) { (fn(group), ...); }, groups_);
  }
  /// Every parameter group, one per element type (groups_type).
  groups_type& groups() { return groups_; }
  /// Every parameter group, one per element type (groups_type), read-only.
  const groups_type& groups() const { return groups_; }
  /// The parameter group of element type Element.
  template <class Element>
  parameter_group<Element, Space>& group() { return std::get<parameter_group<Element, Space>>(groups_); }
  /// fn(slot, values, gradients) for every parameter, in layer order: flat views
  /// (a tied parameter is its owner, met once under the owner's name).
  /// Throws fusor::error when the values are lent (ZeRO-3).
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    for_each_group([&](const auto& group) {
      if (group.values_lent())
        throw error("fusor::nn::network::for_each_parameter: the parameters are sharded over data-parallel ranks "
                    "(ZeRO-3); copy them into a whole network first (data_parallel::copy_parameters_to)");
      for (const parameter_slot& slot : group.slots()) fn(slot, group.value(slot), group.gradient(slot));
    });
  }
  /// Where a parameter's elements lie in the whole, unsplit tensor (its
  /// tensor-parallel slice, nn/parameters.hpp): what a sharded checkpoint saves
  /// and reads, so that it loads into any other split.
  parameter_placement placement(const parameter_slot& slot) const {
    const std::size_t id = directory_.id(slot.name);
    return place_parameter(directory_.spec(id).shape, directory_.spec(id).shard, shard_of_layers()[directory_.layer(id)]);
  }
  /// Whether some layer draws random numbers as it trains (dropout, by the
  /// network's seed): a resumed run repeats them only with the same seed.
  static constexpr bool draws_random_numbers =
      []<std::size_t... I>(std::index_sequence<I...>) {
        return (detail::layer_draws_random_numbers<layer_type<I>>() || ...);
      }(indices{});

  /// The number of parameters (elements) this network holds (its layer range's); a tied weight counts once.
  index_t parameter_count() const { return directory_.parameter_count(); }

 private:
  // Each layer's tensor-parallel slice (0 where not split, or before connect).
  std::vector<int> shard_of_layers() const {
    std::vector<int> shard(depth, 0);
    for_each_index([&]<std::size_t I>() {
      if constexpr (requires(const layer_type<I>& l) { l.shard_index(); }) shard[I] = std::get<I>(layers_).shard_index();
    });
    return shard;
  }
  template <class Fn>
  static void for_each_index(Fn&& fn) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (fn.template operator()<I>(), ...); }(indices{});
  }

  network(index_t max_batch, network_options options, const network* shared)
      : max_batch_(max_batch), stream_(options.stream), first_(options.layers.first),
        last_(std::min(options.layers.last, depth)), directory_(first_, last_) {
    if (max_batch < 1) throw error("fusor::nn::network: max_batch must be at least 1, not " + std::to_string(max_batch));
    if (first_ >= last_)
      throw error("fusor::nn::network: layer range [" + std::to_string(first_) + ", " + std::to_string(last_) +
                  ") is empty; the network has " + std::to_string(depth) + " layers");
    if (shared != nullptr && (shared->first_ != first_ || shared->last_ != last_))
      throw error("fusor::nn::network: parameters shared with a network of another layer range");
    for_each_index([&]<std::size_t I>() {
      // A stage also keeps the output (and its gradient) of the layer before it: its input.
      if (holds(I) || I + 1 == first_) {
        std::get<I>(activations_) = output_tensor<I>(typename output_tensor<I>::extents_type(max_batch), stream_);
        std::get<I>(output_gradients_) = output_tensor<I>(typename output_tensor<I>::extents_type(max_batch), stream_);
      }
      if (!holds(I)) return;
      std::get<I>(layers_).reserve(max_batch, stream_);
      if constexpr (requires(layer_type<I>& l) { l.seed(std::uint64_t{}); })
        std::get<I>(layers_).seed(derive_seed(options.seed, std::uint64_t(1) << 32 | I));
    });
    if (first_ == 0)
      input_buffer_ = tensor<input_precision, typename input_features::batched_extents, row_major, Space>(
          typename input_features::batched_extents(max_batch), stream_);
    lay_out_parameters(shared);
    if (shared == nullptr) initialize(options.seed);
    else seed_ = shared->seed_;
  }

  bool holds(std::size_t layer) const { return layer >= first_ && layer < last_; }
  void require_last_layer(const char* what) const {
    if (last_ != depth)
      throw error(std::string("fusor::nn::network::") + what + ": this network ends before the last layer (at " +
                  std::to_string(last_) + " of " + std::to_string(depth) + "); use with_stage_output");
  }

  template <class Executor, class BeforeLayer = void (*)(std::size_t)>
  void run_layers(const Executor& ex, const run_mode& mode, BeforeLayer&& before_layer = [](std::size_t) {}) {
    streams_.use_on(executor_stream(ex));
    for_each_index([&]<std::size_t I>() {
      if (!holds(I)) return;
      before_layer(I);
      std::get<I>(layers_).forward(layer_input<I>(), output<I>(), mode, ex);
    });
  }

  // fn(flat view of activation I (or its gradient), batch_ samples), I chosen at run time.
  template <class Tensors, class Fn>
  void visit_activation(std::size_t layer, Tensors& tensors, Fn&& fn) {
    for_each_index([&]<std::size_t I>() {
      if (I != layer) return;
      auto& t = std::get<I>(tensors);
      using element = typename std::remove_cvref_t<decltype(t)>::element_type;
      fn(flat_view<element, Space>(t.data(), batch_ * layer_type<I>::output_features::size));
    });
  }

  // Every layer's specs get ids (a parameter's seed is derived from its id, so a
  // layer range draws the same values as the whole network); the layers held get slots.
  void lay_out_parameters(const network* shared) {
    for_each_index([&]<std::size_t I>() {
      add_layer_parameters<storage_t<typename layer_type<I>::precision>>(I, layer_type<I>::parameters());
    });
    if (shared == nullptr) {
      for_each_group([&](auto& group) { group.allocate(stream_); });
    } else {
      for_each_group([&](auto& group) {
        using group_type = std::remove_cvref_t<decltype(group)>;
        group.share(std::get<group_type>(shared->groups_), stream_);
      });
    }
    for_each_index([&]<std::size_t I>() {
      if (!holds(I)) return;
      using element = storage_t<typename layer_type<I>::precision>;
      const std::string prefix = std::to_string(I) + ".";
      for (const tied_slot& tied : std::get<parameter_group<element, Space>>(groups_).tied_slots())
        if (tied.slot.name.starts_with(prefix)) tied_parameters_.push_back(tied.slot.name);
      bind_layer<I>();
    });
  }

  // Files layer `layer`'s specs (parameter_directory checks the ties) and, for a layer held, adds them to the
  // group of its element type (detail::add_layer_parameters, compiled once per element type).
  template <class Element>
  void add_layer_parameters(std::size_t layer, std::vector<parameter_spec> specs) {
    detail::add_layer_parameters(directory_, std::get<parameter_group<Element, Space>>(groups_), layer,
                                 std::move(specs));
  }

  // Hands layer I its parameters' views, in the order of its specs (a tied
  // parameter reads its owner's values and writes a gradient of its own).
  template <std::size_t I>
  void bind_layer() {
    std::get<I>(layers_).bind(binding_of<storage_t<typename layer_type<I>::precision>>(I));
  }
  // Layer `layer`'s parameter views (bind_layer), per element type.
  template <class Element>
  parameter_binding<Element, Space> binding_of(std::size_t layer) const {
    return detail::layer_binding(directory_, std::get<parameter_group<Element, Space>>(groups_), layer);
  }

  // After layer I's backward: the gradients of parameters tied to its
  // parameters are added into them (owner += tied), before anyone reads them.
  template <std::size_t I, class Executor>
  void add_tied_gradients(const Executor& ex) {
    if (tied_parameters_.empty()) return;
    const std::string prefix = std::to_string(I) + ".";
    for_each_group([&](const auto& group) {
      for (const tied_slot& tied : group.tied_slots())
        if (tied.owner.starts_with(prefix)) {
          const auto owner = group.gradient(*group.find(tied.owner));
          detail::add_into<typename decltype(owner)::element_type, Space>(owner, group.tied_gradient(tied), ex);
        }
    });
  }

  template <class V, class Executor>
  void bind_input(const V& x, const Executor& ex) {
    static_assert(V::rank >= 1, "fusor: nn::network::forward: the input needs a batch axis");
    const index_t batch = x.extent(0);
    if (batch < 1 || batch > max_batch_)
      throw shape_error("fusor::nn::network::forward: a batch of " + std::to_string(batch) +
                        " samples (input shape " + shape_string(x.extents()) + "), where the network takes 1 to " +
                        std::to_string(max_batch_) + " (the batch it was built for)");
    if (x.size() != batch * input_features::size)
      throw shape_error("fusor::nn::network::forward: input shape " + shape_string(x.extents()) + " is not " +
                        std::to_string(batch) + " samples of " + shape_string(typename input_features::sample_extents{}) +
                        " each (the network's input, without the batch)");
    if (!x.is_contiguous() || !std::is_same_v<typename V::layout_type, row_major>)
      throw shape_error("fusor::nn::network::forward: the input must be contiguous and row-major");
    batch_ = batch;
    using element = typename V::element_type;
    const view<typename V::precision, typename input_features::batched_extents, row_major, typename V::space> reshaped(
        x.data(), batch);
    if constexpr (std::is_same_v<element, storage_t<input_precision>>) {
      input_ = detail::with_precision<input_precision>(reshaped);
    } else if constexpr (std::is_same_v<typename V::space, Space>) {
      input_ = input_view(input_buffer_.data(), batch);
      // Flat: one instance of the conversion for every input shape.
      detail::convert_into<storage_t<input_precision>, element, Space>(
          detail::flat_elements<storage_t<input_precision>, Space>(input_buffer_.data(), x.size()),
          detail::flat_elements<element, Space>(x.data(), x.size()), ex);
    } else {
      input_ = input_view(input_buffer_.data(), batch);
      assign(input_, cast<compute_t<input_precision>>(reshaped), ex);
    }
  }

  template <std::size_t I>
  auto layer_input() const {
    if constexpr (I == 0) return input_;
    else return detail::with_precision<typename layer_type<I>::precision>(output<I - 1>());
  }
  template <std::size_t I>
  auto output() const {
    using P = typename layer_type<I>::precision;
    return activation_view<P, typename layer_type<I>::output_features, Space>(std::get<I>(activations_).data(), batch_);
  }
  template <std::size_t I>
  auto output_gradient_of() const {
    using P = typename layer_type<I>::precision;
    return activation_view<P, typename layer_type<I>::output_features, Space>(std::get<I>(output_gradients_).data(),
                                                                             batch_);
  }
  template <std::size_t I, class Executor, class LayerDone>
  void backward_from(const Executor& ex, LayerDone& layer_done) {
    using P = layer_input_precision<layer_type<I>>;
    activation_view<P, typename layer_type<I>::input_features, Space> dx{};
    if constexpr (I > 0) dx = detail::with_precision<P>(output_gradient_of<I - 1>());
    else dx = input_gradient_;
    if (holds(I)) {
      std::get<I>(layers_).backward(layer_input<I>(), output<I>(), output_gradient_of<I>(), dx, ex);
      add_tied_gradients<I>(ex);
      layer_done(I);
    }
    if constexpr (I > 0) backward_from<I - 1>(ex, layer_done);
  }

  index_t max_batch_;
  index_t batch_ = 0;
  stream_t stream_;
  layers_type layers_;
  activations_type activations_;
  activations_type output_gradients_;
  groups_type groups_;
  std::uint64_t seed_ = 0;
  std::size_t first_ = 0, last_ = depth;
  detail::parameter_directory directory_;  // every layer's parameter specs, by name
  std::vector<std::string> tied_parameters_;  // the tied parameters this network holds (none: nothing to add)
  input_view input_{};
  input_view input_gradient_{};
  tensor<input_precision, typename input_features::batched_extents, row_major, Space> input_buffer_;
  // Last: destroyed first, so the frees above wait for the last stream that ran this network.
  stream_binding<Space> streams_{stream_};
};

}  // namespace fusor::nn
