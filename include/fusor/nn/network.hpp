// fusor/nn/network.hpp — the state of a sequential<> network: its layers, the
// activations forward keeps for backward, and its parameters in one flat buffer
// per element type (nn/parameters.hpp).
//
//   nn::network<mlp, fs::fp32, fs::device_space> net(256, {.seed = 1, .stream = s});
//   auto logits = net.forward(images, ex);           // [batch, 10], kept for backward
//   loss(losses, net.output_gradient(), logits, labels, ex);   // the loss writes dlogits here
//   net.backward(ex);                                 // every parameter's gradient
//   net.for_each_group([&](auto& group) { optimizer.step(group.values(), group.gradients(), ...); });
//
// Everything a step touches is allocated in the constructor for `max_batch`
// samples; forward and backward allocate nothing (batches up to max_batch).
// Parameters are named as PyTorch names those of nn.Sequential: "<layer
// index>.<name>", e.g. "0.weight", so a checkpoint loads into the same model there.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/nn/random.hpp"
#include "fusor/nn/sequential.hpp"

namespace fusor::nn {

struct network_options {
  std::uint64_t seed = 0;  // initial parameters are a function of this alone
  stream_t stream = {};    // where device memory is allocated
};

namespace detail {
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
                "fusor::nn: adjacent layers must store activations in the same element type (their precision "
                "policies differ in storage)");
  return view<P, typename V::extents_type, typename V::layout_type, typename V::space>(v.data(), v.mapping());
}
}  // namespace detail

template <class Sequential, class Precision = fp32, class Space = host_space>
class network {
  static_assert(is_sequential_v<Sequential>, "fusor::nn::network's first argument is an nn::sequential<...>");

 public:
  using layers_type = typename Sequential::template instances<Precision, Space>;
  static constexpr std::size_t depth = Sequential::depth;
  template <std::size_t I>
  using layer_type = std::tuple_element_t<I, layers_type>;
  using input_features = typename Sequential::input_features;
  using output_features = typename Sequential::output_features;
  using input_precision = layer_input_precision<layer_type<0>>;  // int32 for an embedding
  using output_precision = typename layer_type<depth - 1>::precision;
  using input_view = activation_view<input_precision, input_features, Space>;
  using output_view = activation_view<output_precision, output_features, Space>;
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
  // The element types of the parameter groups, in order (a detail::type_list).
  using group_elements = typename detail::unique_types<typename activation_tuple<indices>::elements>::type;
  using groups_type = typename detail::group_tuple<Space, group_elements>::type;

  explicit network(index_t max_batch, network_options options = {}) : max_batch_(max_batch), stream_(options.stream) {
    if (max_batch < 1) throw error("fusor::nn::network: max_batch must be at least 1, not " + std::to_string(max_batch));
    for_each_index([&]<std::size_t I>() {
      std::get<I>(activations_) = output_tensor<I>(typename output_tensor<I>::extents_type(max_batch), stream_);
      std::get<I>(output_gradients_) = output_tensor<I>(typename output_tensor<I>::extents_type(max_batch), stream_);
      std::get<I>(layers_).reserve(max_batch, stream_);
      if constexpr (requires(layer_type<I>& l) { l.seed(std::uint64_t{}); })
        std::get<I>(layers_).seed(derive_seed(options.seed, std::uint64_t(1) << 32 | I));
    });
    input_buffer_ = tensor<input_precision, typename input_features::batched_extents, row_major, Space>(
        typename input_features::batched_extents(max_batch), stream_);
    lay_out_parameters();
    initialize(options.seed);
  }
  network(const network&) = delete;
  network& operator=(const network&) = delete;

  // Draws every parameter afresh from `seed` (the same seed gives the same values anywhere).
  void initialize(std::uint64_t seed) {
    for_each_group([&](auto& group) {
      using element = typename std::remove_cvref_t<decltype(group)>::element_type;
      std::vector<element> host(static_cast<std::size_t>(group.size()), convert<element>(0.0f));
      for (std::size_t k = 0; k != group.slots().size(); ++k) {
        const parameter_slot& slot = group.slots()[k];
        const std::size_t id = slot_ids_[slot.name];
        initialize_parameter(host.data() + slot.offset, slot.size, specs_[id].init, derive_seed(seed, id));
      }
      copy(group.values(), flat_view<element, host_space>(host.data(), group.size()));
    });
  }

  // y = network(x). x: a batch of samples, [batch, features...] or any contiguous
  // row-major view whose elements are batch * features (the batch is its first
  // extent); another element type is converted in one pass. x must stay valid
  // until backward(), which reads it.
  template <class X, class Executor>
  output_view forward(const X& x, const Executor& ex, const run_mode& mode = training) {
    const auto& xv = as_view(x);
    bind_input(xv, ex);
    for_each_index([&]<std::size_t I>() { std::get<I>(layers_).forward(layer_input<I>(), output<I>(), mode, ex); });
    return output<depth - 1>();
  }

  // Where the loss writes the gradient of the output, for the last forward's batch.
  output_view output_gradient() const { return output_gradient_of<depth - 1>(); }
  // The output of the last forward.
  output_view output() const { return output<depth - 1>(); }
  index_t batch() const { return batch_; }
  index_t max_batch() const { return max_batch_; }

  // Every parameter's gradient from output_gradient() (overwritten, not accumulated).
  template <class Executor>
  void backward(const Executor& ex) {
    backward(ex, input_view{});
  }
  // The same, and the gradient of the input into input_gradient ([batch, features...]
  // of the input precision): what a pipeline stage sends to the one before it.
  template <class Executor>
  void backward(const Executor& ex, const input_view& input_gradient) {
    backward(ex, input_gradient, [](std::size_t) {});
  }
  // The same, calling layer_done(I) as soon as layer I's parameter gradients are
  // written (layers in reverse order): data parallelism starts communicating a
  // bucket of gradients there while the layers before it are still working.
  template <class Executor, class LayerDone>
  void backward(const Executor& ex, const input_view& input_gradient, LayerDone&& layer_done) {
    if (batch_ == 0) throw error("fusor::nn::network::backward: call forward first");
    if (input_gradient.data() != nullptr && input_gradient.extent(0) != batch_)
      throw shape_error("fusor::nn::network::backward: input gradient of shape " +
                        shape_string(input_gradient.extents()) + " for a batch of " + std::to_string(batch_));
    input_gradient_ = input_gradient;
    backward_from<depth - 1>(ex, layer_done);
  }

  template <std::size_t I>
  layer_type<I>& layer() { return std::get<I>(layers_); }
  // fn(layer) for every layer instance, in order (e.g. to connect tensor-parallel
  // layers to their communicator).
  template <class Fn>
  void for_each_layer(Fn&& fn) {
    for_each_index([&]<std::size_t I>() { fn(std::get<I>(layers_)); });
  }

  // Where layer `layer`'s parameters lie in the flat buffers of group<Element>():
  // [begin, end) offsets (begin == end where it has none of that type). A layer's
  // parameters are contiguous and layers follow each other in order.
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

  // fn(parameter_group<E, Space>&) for each element type E the parameters use.
  template <class Fn>
  void for_each_group(Fn&& fn) {
    std::apply([&](auto&... group) { (fn(group), ...); }, groups_);
  }
  template <class Fn>
  void for_each_group(Fn&& fn) const {
    std::apply([&](const auto&... group) { (fn(group), ...); }, groups_);
  }
  groups_type& groups() { return groups_; }
  const groups_type& groups() const { return groups_; }
  template <class Element>
  parameter_group<Element, Space>& group() { return std::get<parameter_group<Element, Space>>(groups_); }
  // fn(name, values, gradients) for every parameter, in layer order: flat views.
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    for_each_group([&](const auto& group) {
      for (const parameter_slot& slot : group.slots()) fn(slot, group.value(slot), group.gradient(slot));
    });
  }
  index_t parameter_count() const {
    index_t n = 0;
    for (const auto& spec : specs_) n += spec.size();
    return n;
  }

 private:
  template <class Fn>
  static void for_each_index(Fn&& fn) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (fn.template operator()<I>(), ...); }(indices{});
  }

  void lay_out_parameters() {
    for_each_index([&]<std::size_t I>() {
      using layer = layer_type<I>;
      using element = storage_t<typename layer::precision>;
      auto& group = std::get<parameter_group<element, Space>>(groups_);
      for (parameter_spec spec : layer::parameters()) {
        const std::string name = std::to_string(I) + "." + spec.name;
        group.add(name, spec.shape);
        slot_ids_.add(name, specs_.size());
        specs_.push_back(std::move(spec));
      }
    });
    for_each_group([&](auto& group) { group.allocate(stream_); });
    for_each_index([&]<std::size_t I>() {
      using layer = layer_type<I>;
      using element = storage_t<typename layer::precision>;
      auto& group = std::get<parameter_group<element, Space>>(groups_);
      parameter_binding<element, Space> binding;
      for (const parameter_slot& slot : group.slots())
        if (slot.name.starts_with(std::to_string(I) + ".")) {
          binding.values.push_back(group.value(slot));
          binding.gradients.push_back(group.gradient(slot));
        }
      std::get<I>(layers_).bind(binding);
    });
  }

  template <class V, class Executor>
  void bind_input(const V& x, const Executor& ex) {
    static_assert(V::rank >= 1, "fusor::nn::network::forward: the input needs a batch axis");
    const index_t batch = x.extent(0);
    if (batch < 1 || batch > max_batch_)
      throw shape_error("fusor::nn::network::forward: a batch of " + std::to_string(batch) +
                        " samples (input shape " + shape_string(x.extents()) + ") for a network built for at most " +
                        std::to_string(max_batch_));
    if (x.size() != batch * input_features::size)
      throw shape_error("fusor::nn::network::forward: input shape " + shape_string(x.extents()) + " is not " +
                        std::to_string(batch) + " samples of " +
                        shape_string(typename input_features::batched_extents(batch)) + " (without the batch)");
    if (!x.is_contiguous() || !std::is_same_v<typename V::layout_type, row_major>)
      throw shape_error("fusor::nn::network::forward: the input must be contiguous and row-major");
    batch_ = batch;
    using element = typename V::element_type;
    const view<typename V::precision, typename input_features::batched_extents, row_major, typename V::space> reshaped(
        x.data(), batch);
    if constexpr (std::is_same_v<element, storage_t<input_precision>>) {
      input_ = detail::with_precision<input_precision>(reshaped);
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
    std::get<I>(layers_).backward(layer_input<I>(), output<I>(), output_gradient_of<I>(), dx, ex);
    layer_done(I);
    if constexpr (I > 0) backward_from<I - 1>(ex, layer_done);
  }

  // Parameter name -> index into specs_.
  struct slot_index {
    std::vector<std::pair<std::string, std::size_t>> entries;
    void add(const std::string& n, std::size_t i) { entries.emplace_back(n, i); }
    std::size_t operator[](const std::string& n) const {
      for (const auto& [name, i] : entries)
        if (name == n) return i;
      throw error("fusor::nn::network: no parameter named " + n);
    }
  };

  index_t max_batch_;
  index_t batch_ = 0;
  stream_t stream_;
  layers_type layers_;
  activations_type activations_;
  activations_type output_gradients_;
  groups_type groups_;
  std::vector<parameter_spec> specs_;
  slot_index slot_ids_;
  input_view input_{};
  input_view input_gradient_{};
  tensor<input_precision, typename input_features::batched_extents, row_major, Space> input_buffer_;
};

}  // namespace fusor::nn
