// fusor/optim/trainer.hpp — one training step of a classifier in one call:
// forward, softmax cross-entropy, backward, the shared per-step decisions
// (norm, clipping, Inf/NaN skip, loss scale, learning rate) and the fused
// optimizer over every parameter group, with nothing read back on the host.
//
//   nn::network<mlp, fs::bf16, fs::device_space> net(256, {.seed = 1, .stream = s});
//   optim::trainer<decltype(net), optim::adamw> train(
//       net, {.schedule = optim::learning_rate_schedule::constant(1e-3f)},
//       optim::adamw_options{.weight_decay = 1e-4f});
//   train.step(images, labels, ex);              // capturable as a CUDA graph (graph/capture.hpp)
//   train.loss().totals()                        // {mean loss, accuracy, samples}: waits, once per epoch
//
// One optimizer per parameter group (element type): fp32 groups update in
// place; bf16/fp16 groups keep fp32 master weights inside their optimizer. With
// loss_scaling.dynamic (fp16) the gradient of the loss is multiplied by the
// device-resident scale before backward and divided out inside the optimizer.
// A network split across ranks (tensor parallelism) needs the global norm:
// train.reduce_gradient_norm_with(tp) (optim/gradient_norm_reduction.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/stream_binding.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/graph/host_effects.hpp"
#include "fusor/nn/loss.hpp"
#include "fusor/nn/network.hpp"
#include "fusor/nn/sharding.hpp"
#include "fusor/optim/gradient_norm_reduction.hpp"
#include "fusor/optim/initialization_check.hpp"
#include "fusor/optim/nonfinite_note.hpp"
#include "fusor/optim/pruning.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/schedule.hpp"
#include "fusor/optim/state_domain.hpp"
#include "fusor/optim/state_layout.hpp"
#include "fusor/optim/update_controller.hpp"

namespace fusor::optim {

/// What a step whose gradients hold Inf or NaN does.
enum class nonfinite_gradients {
  automatic,  ///< stop; skip under a dynamic loss scale (fp16), whose overflows are expected: the scale backs off
  stop,       ///< training stops with an error naming the step and the first layer (parameters stay those before it)
  skip,       ///< that step changes nothing, training goes on
};

/// How optim::trainer trains: learning-rate schedule, clipping, loss scaling, stream, and what Inf/NaN gradients do.
struct trainer_options {
  /// The learning-rate schedule (default: a constant 1e-3).
  learning_rate_schedule schedule = learning_rate_schedule::constant(1e-3f);
  /// Clipping by global gradient norm (default: none).
  clip_options clip = {};
  /// Loss scaling (default: none, the scale stays 1).
  loss_scaling scaling = {};
  stream_t stream = {};  ///< where the optimizer state, loss and step scalars live (see network_options::stream)
  /// Inf/NaN gradients: stop with an error, or skip the step (optim::trainer,
  /// parallel::data_parallel and parallel::pipeline alike).
  nonfinite_gradients on_nonfinite = nonfinite_gradients::automatic;
};
/// Whether `o` makes Inf/NaN gradients stop training: nonfinite_gradients::stop, or automatic without a
/// dynamic loss scale.
inline bool stops_on_nonfinite(const trainer_options& o) {
  return o.on_nonfinite == nonfinite_gradients::stop ||
         (o.on_nonfinite == nonfinite_gradients::automatic && !o.scaling.dynamic);
}

/// One training step of a classifier (or sequence model) in one call: forward, softmax cross-entropy,
/// backward, the update_controller's decisions and one `Optimizer` (adamw, sgd) per parameter group, with
/// nothing read back on the host.
template <class Network, template <class, class> class Optimizer>
class trainer {
  static_assert(!Network::output_split, FUSOR_SPLIT_OUTPUT_MESSAGE);

 public:
  /// The network's memory space, where the optimizer state, loss and step scalars live too.
  using space = typename Network::space;

 private:
  template <class List>
  struct optimizer_tuple;
  template <class... E>
  struct optimizer_tuple<nn::detail::type_list<E...>> {
    using type = std::tuple<Optimizer<E, space>...>;
  };
  using optimizers_type = typename optimizer_tuple<typename Network::group_elements>::type;
  // Whether Executor reaches the network's memory, the images' and the labels' (each a view or a tensor).
  template <class Images, class Labels, class Executor>
  static constexpr bool reaches = executor_reaches_v<Executor, space> &&
                                  executor_reaches_v<Executor, nn::detail::space_of_t<Images>> &&
                                  executor_reaches_v<Executor, nn::detail::space_of_t<Labels>>;

 public:
  /// A trainer for `network` (kept by reference: it must outlive the trainer), with one optimizer per
  /// parameter group made from `optimizer_options` (adamw_options, sgd_options). Call initialize() next.
  template <class OptimizerOptions>
  trainer(Network& network, trainer_options options, const OptimizerOptions& optimizer_options)
      : network_(network),
        options_(options),
        controller_(options.schedule, options.clip, options.scaling, options.stream),
        loss_(network.max_batch() * loss_rows_per_sample, {}, options.stream),
        optimizers_(make_optimizers(network, optimizer_options, options.stream,
                                    std::make_index_sequence<std::tuple_size_v<optimizers_type>>{})) {
    network.for_each_layer([&](const auto& layer) {
      if constexpr (requires { std::remove_cvref_t<decltype(layer)>::shard_ways; })
        split_ways_ = std::max(split_ways_, int(std::remove_cvref_t<decltype(layer)>::shard_ways));
    });
    controller_.stop_on_nonfinite(stops_on_nonfinite(options));
  }

  /// Master weights and moments from the network's current parameters (after
  /// construction, or after loading a checkpoint of parameters only).
  template <class Executor>
  void initialize(const Executor& ex) {
    streams_.use_on(executor_stream(ex));
    for_each_group_and_optimizer([&](auto& group, auto& optimizer) { optimizer.initialize(group.values(), ex); });
    initialized_.mark();
  }

  /// One step on a batch: images [batch, features...] (any element type the
  /// network converts), labels [batch] int32 — or, for a network whose output
  /// is a sequence of logits [batch, time, vocabulary], labels [batch, time]
  /// (the mean loss is over every token not equal to the ignore index).
  /// Throws nonfinite_error as check_not_stopped() does.
  template <class Images, class Labels, class Executor>
  void step(const Images& images, const Labels& labels, const Executor& ex) {
    static_assert(reaches<Images, Labels, Executor>, FUSOR_NETWORK_MEMORY_MESSAGE);
    static_assert(nn::detail::integer_labels_v<Labels>, FUSOR_INTEGER_LABELS_MESSAGE);
    // After a failed check, nothing deeper is instantiated: one error, not a cascade.
    if constexpr (reaches<Images, Labels, Executor> && nn::detail::integer_labels_v<Labels>) {
      if (norm_reduction_ == nullptr && split_ways_ > 1 &&
          (options_.clip.max_norm > 0.0f || options_.scaling.dynamic))
        throw error("fusor::optim::trainer: the network's layers are split " + std::to_string(split_ways_) +
                    " ways (tensor parallelism), so clipping and the loss scale's Inf/NaN skip need the norm of "
                    "every rank's gradients: call reduce_gradient_norm_with(tp) with the parallel::tensor_parallel "
                    "before the first step");
      initialized_.require(detail::keeps_master_weights(*this), "fusor::optim::trainer");
      streams_.use_on(executor_stream(ex));
      nn::run_mode mode{true, host_steps_, controller_.scalars().step().data()};
      graph::host_effect([this] { ++host_steps_; });  // repeated by each replay of a captured step
      const auto logits = network_.forward(images, ex, mode);
      const auto dlogits = network_.output_gradient();
      loss_.forward_backward(logits, labels, dlogits, ex);
      if (options_.scaling.dynamic)  // flat: one instance for every network
        multiply_by(flat_view<typename decltype(dlogits)::element_type, space>(dlogits.data(), dlogits.size()),
                    scalar(controller_.scalars().loss_scale()), ex);
      network_.backward(ex);
      controller_.begin_step(ex);
      network_.for_each_group([&](auto& group) { controller_.accumulate_gradient_norm(group.gradients(), ex); });
      if (norm_reduction_ != nullptr)
        norm_reduction_->reduce(controller_.scalars().gradient_norm_squared(), nn::executor_stream(ex));
      controller_.prepare_update(ex);
      for_each_group_and_optimizer([&](auto& group, auto& optimizer) {
        optimizer.step(group.values(), group.gradients(), controller_.scalars(), ex);
      });
      if (pruning_applies_) apply_pruning(ex);
      controller_.finish_step(ex);
      stop_note_.record(controller_.scalars(), ex);
      detail::check_naming_labels([&] { check_not_stopped(); }, labels, logits, loss_.options().ignore_index);
    }
  }

  /// Throws nonfinite_error if a step had Inf/NaN gradients under
  /// nonfinite_gradients::stop (the default without a dynamic loss scale),
  /// naming the step and the first layer backward found them in. step() and
  /// evaluate() call it. On the host it sees the step just taken; on a GPU it
  /// reads a copy that each step leaves in pinned memory, without waiting, so
  /// it sees the note of a step the GPU has finished (a few steps later at
  /// most; the steps since changed nothing). A loop replaying a captured step
  /// calls it itself.
  void check_not_stopped() {
    const std::int64_t at = stop_note_.seen(controller_.scalars());
    if (at != 0) throw nonfinite_error(nonfinite_message("fusor::optim::trainer", at, network_, true), at);
  }

  /// Makes the squared gradient norm global before clipping and the Inf/NaN
  /// skip read it, every step from now on (parallel::tensor_parallel is one:
  /// each rank holds part of the gradients). `reduction` must outlive the steps.
  void reduce_gradient_norm_with(gradient_norm_reduction<space>& reduction) { norm_reduction_ = &reduction; }

  /// Loss and accuracy on a batch, without learning.
  template <class Images, class Labels, class Executor>
  void evaluate(const Images& images, const Labels& labels, const Executor& ex) {
    static_assert(reaches<Images, Labels, Executor>, FUSOR_NETWORK_MEMORY_MESSAGE);
    static_assert(nn::detail::integer_labels_v<Labels>, FUSOR_INTEGER_LABELS_MESSAGE);
    check_not_stopped();
    if constexpr (reaches<Images, Labels, Executor> && nn::detail::integer_labels_v<Labels>) {
      streams_.use_on(executor_stream(ex));
      loss_.evaluate(network_.forward(images, ex, nn::evaluation), labels, ex);
    }
  }

  /// Magnitude pruning of every weight matrix (not biases): the `fraction` of
  /// smallest-magnitude weights become zero and stay zero after every later step.
  /// The masks are part of the training state (save_training_state), so a
  /// resumed run keeps pruning; a distributed save refuses a pruned trainer.
  template <class Executor>
  void prune(double fraction, const Executor& ex) {
    streams_.use_on(executor_stream(ex));
    std::size_t k = 0;
    for_each_group_and_optimizer([&](auto& group, auto&) {
      auto& pruning = pruning_for(k++, group.size());
      std::vector<std::pair<index_t, index_t>> ranges;
      for (const nn::parameter_slot& slot : group.slots())
        if (slot.shape.size() >= 2) ranges.emplace_back(slot.offset, slot.offset + slot.size);
      pruning.prune_smallest(group.values(), fraction, ranges, ex);
    });
    pruning_applies_ = true;
    initialize(ex);  // master weights follow the pruned values
  }

  /// Whether prune() was called (or a pruned training state loaded): every step keeps the pruned weights zero.
  bool pruned() const { return pruning_applies_; }
  /// The checkpoint name of parameter group `group`'s pruning mask.
  static std::string pruning_mask_name(std::size_t group) {
    return "pruning." + std::to_string(group) + ".mask";
  }
  /// fn(name, mask) for each parameter group's pruning mask (pruning_mask_name; a byte per parameter, 1 kept,
  /// 0 pruned), once pruned(); nothing before.
  template <class Fn>
  void for_each_pruning_mask(Fn&& fn) const {
    if (!pruning_applies_) return;
    for (std::size_t k = 0; k < pruning_.size(); ++k) fn(pruning_mask_name(k), pruning_[k].mask());
  }
  /// A mask of ones (nothing pruned) for each parameter group, in the network's memory: for a checkpoint loader
  /// to fill before replace_pruning takes them, so a refused file leaves the trainer as it was.
  std::vector<magnitude_pruning<space>> unpruned_masks() {
    std::vector<magnitude_pruning<space>> masks;
    for_each_group_and_optimizer([&](auto& group, auto&) { masks.emplace_back(group.size(), options_.stream); });
    return masks;
  }
  /// From the next step, `masks` (one per parameter group, as unpruned_masks makes them) prune the parameters;
  /// none: nothing is pruned. Throws fusor::error for another count of masks or of their parameters.
  void replace_pruning(std::vector<magnitude_pruning<space>> masks) {
    if (!masks.empty()) {
      std::size_t k = 0;
      for_each_group_and_optimizer([&](auto& group, auto&) {
        if (k < masks.size() && masks[k].parameter_count() != group.size())
          throw error("fusor::optim::trainer::replace_pruning: mask " + std::to_string(k) + " covers " +
                      std::to_string(masks[k].parameter_count()) + " parameters, its group has " +
                      std::to_string(group.size()));
        ++k;
      });
      if (k != masks.size())
        throw error("fusor::optim::trainer::replace_pruning: " + std::to_string(masks.size()) +
                    " masks for " + std::to_string(k) + " parameter groups");
    }
    pruning_applies_ = !masks.empty();
    pruning_ = std::move(masks);
  }

  /// The loss, whose totals() (mean loss, accuracy, samples) cover step() and evaluate() since its reset().
  nn::softmax_cross_entropy<space>& loss() { return loss_; }
  /// The per-step decisions and their step scalars (learning rate, step count, loss scale).
  update_controller<space>& controller() { return controller_; }
  /// The network being trained.
  Network& network() { return network_; }
  /// Steps taken, counted on the host (step() calls and replays of a captured step, skipped ones included).
  std::uint64_t steps_taken() const { return host_steps_; }

  /// fn(name, view) for everything besides the parameters that training resumes
  /// from: each optimizer's state ("optimizer.<group>.<state>") and the step scalars;
  /// fn(name, view, state_domain) where fn takes the values each can hold.
  template <class Fn>
  void for_each_state(Fn&& fn) {
    std::size_t k = 0;
    for_each_group_and_optimizer([&](auto&, auto& optimizer) {
      const std::string prefix = "optimizer." + std::to_string(k++) + ".";
      optimizer.for_each_state([&](const auto& name, const auto& v, state_domain domain) {
        detail::visit_state(fn, prefix + name, v, domain);
      });
    });
    controller_.for_each_state([&](const auto& name, const auto& v, state_domain domain) {
      detail::visit_state(fn, "controller." + std::string(name), v, domain);
    });
  }
  /// After loading the state back, the host-side step count (dropout's stream of masks).
  void set_steps_taken(std::uint64_t steps) {
    host_steps_ = steps;
    initialized_.mark();  // the loaded state holds the master weights
  }
  /// fn(parameter group, its optimizer, where the optimizer holds the group's
  /// elements): each optimizer holds its whole group.
  template <class Fn>
  void for_each_optimizer(Fn&& fn) {
    for_each_group_and_optimizer([&](auto& group, auto& optimizer) { fn(group, optimizer, state_layout::whole(group.size())); });
  }

 private:
  // Rows of logits per sample: 1 for a classifier, `time` for a sequence model.
  static constexpr index_t loss_rows_per_sample = [] {
    using out = typename Network::output_features;
    return out::size / index_t(nn::detail::feature_extent<out::rank - 1>(out{}));
  }();

  template <class OptimizerOptions, std::size_t... I>
  static optimizers_type make_optimizers(Network& network, const OptimizerOptions& o, stream_t stream,
                                         std::index_sequence<I...>) {
    return optimizers_type{std::tuple_element_t<I, optimizers_type>(
        std::get<I>(network.groups()).size(), o, stream)...};
  }
  template <class Fn>
  void for_each_group_and_optimizer(Fn&& fn) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (fn(std::get<I>(network_.groups()), std::get<I>(optimizers_)), ...);
    }(std::make_index_sequence<std::tuple_size_v<optimizers_type>>{});
  }
  magnitude_pruning<space>& pruning_for(std::size_t k, index_t size) {
    while (pruning_.size() <= k) pruning_.emplace_back(0, options_.stream);
    if (pruning_[k].parameter_count() != size) pruning_[k] = magnitude_pruning<space>(size, options_.stream);
    return pruning_[k];
  }
  // Parameters and, for bf16/fp16 groups, their fp32 master weights: one pass.
  template <class Executor>
  void apply_pruning(const Executor& ex) {
    std::size_t k = 0;
    for_each_group_and_optimizer(
        [&](auto& group, auto& optimizer) { pruning_[k++].apply(group.values(), optimizer, ex); });
  }

  Network& network_;
  trainer_options options_;
  update_controller<space> controller_;
  nn::softmax_cross_entropy<space> loss_;
  optimizers_type optimizers_;
  std::vector<magnitude_pruning<space>> pruning_;
  bool pruning_applies_ = false;
  nonfinite_note<space> stop_note_;  // where the host reads stopped_at_step without waiting
  std::uint64_t host_steps_ = 0;
  detail::initialization_check initialized_;  // initialize() or a loaded state came before the first step
  gradient_norm_reduction<space>* norm_reduction_ = nullptr;
  int split_ways_ = 1;  // the most ways a layer is split (tensor parallelism)
  // Last: destroyed first, so the frees above wait for the last stream that ran a step.
  stream_binding<space> streams_{options_.stream};
};

}  // namespace fusor::optim
