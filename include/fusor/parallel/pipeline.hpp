// fusor/parallel/pipeline.hpp — pipeline parallelism: a trainer whose network is
// split over the ranks of a communicator, one stage (a run of layers) per rank,
// each global batch cut into micro-batches that flow forward through the stages
// and back, with the GPipe or the 1F1B schedule (parallel/pipeline_schedule.hpp).
//
//   fusor::comm::mpi world;                    // or comm::nccl (device memory), comm::single
//   parallel::pipeline<mlp, fp32, host_space, optim::adamw, comm::mpi> train(
//       world, 128, {.seed = 1}, {.schedule = ...}, optim::adamw_options{}, {.micro_batches = 8});
//   train.initialize(ex);
//   train.step(images, labels, ex);            // stage 0 reads images, the last stage labels
//   train.totals();                            // loss and accuracy, from the last stage, on every rank
//   train.report();                            // bubble (p - 1) / m and this rank's measured idle time
//
// Each stage holds its layers' parameters (named as in the whole network, so a
// checkpoint of every stage is one of the whole network) and one set of
// activations per micro-batch in flight (networks sharing its parameters).
// Activations go forward and gradients back point to point
// (parallel/pipeline_messages.hpp). The loss gives each micro-batch the
// gradient of the global batch's mean loss (scaled by 1 / micro-batches), and
// backward overwrites the gradients, so after each micro-batch they are added
// into an fp32 buffer per parameter group (one pass): the step sees the global
// batch's gradient and equals one step of optim::trainer on it. Clipping and the
// Inf/NaN skip use the gradient norm of every stage (one all-reduce of the
// squared norm). Dropout draws each micro-batch's masks by its rows' place in
// the global batch (run_mode::first_sample), as one process would.
//
// Data parallelism across pipelines (a mesh's data x pipeline ranks,
// parallel/mesh.hpp): a pipeline over the mesh's pipeline group per replica,
// each stepping on its own rows, constructed with the data group too:
//   parallel::pipeline<...> train(grid.pipeline(), grid.data(), replica_batch, {.seed = 1}, {...},
//                                 optim::adamw_options{}, {.micro_batches = 8},
//                                 {.shard_optimizer_state = true});    // ZeRO-1 over the data group
// The update is the data-parallel engine's (parallel/data_parallel_group.hpp,
// the same as parallel::data_parallel's): after the last micro-batch's
// backward each bucket of the stage's gradients (the fp32 sum of its
// micro-batches) is summed over the replicas — all_reduce, or under ZeRO-1
// reduce_scatter, each rank updating its shard and all_gather bringing the
// parameters back — in native or bf16 communication, so every replica applies
// the update of the global batch. ZeRO-2/3 are refused there (below).
// Tensor parallelism inside a stage: a network split over the mesh's tensor
// group (nn::column_parallel / row_parallel layers), every context connected
// to it, and the tensor group making the norm global:
//   std::vector<std::unique_ptr<parallel::tensor_parallel<...>>> tp;
//   train.for_each_context([&](auto& net) { tp.push_back(std::make_unique<...>(net, grid.tensor())); });
//   train.reduce_gradient_norm_with(*tp.front());
//
// With a communicator whose calls are ordered on a CUDA stream (nccl) the
// executor must run on that stream; the host never waits for a message, so the
// measured idle time (host time blocked on a peer) is 0 there.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fusor/comm/communicator.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/nn/loss.hpp"
#include "fusor/nn/network.hpp"
#include "fusor/optim/gradient_norm_reduction.hpp"
#include "fusor/optim/initialization_check.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/state_layout.hpp"
#include "fusor/optim/trainer.hpp"
#include "fusor/optim/update_controller.hpp"
#include "fusor/parallel/data_parallel_group.hpp"
#include "fusor/parallel/data_parallel_options.hpp"
#include "fusor/parallel/pipeline_messages.hpp"
#include "fusor/parallel/pipeline_schedule.hpp"
#include "fusor/parallel/rank_numbers.hpp"
#include "fusor/parallel/stream_order.hpp"

namespace fusor::parallel {

/// What a user chooses for a pipeline: micro-batches per step, the schedule and the stage map.
struct pipeline_options {
  index_t micro_batches = 4;  ///< pieces of each global batch (1 to pipeline_max_micro_batches, dividing the batch)
  pipeline_schedule schedule = pipeline_schedule::one_forward_one_backward;  ///< GPipe or 1F1B
  std::vector<std::size_t> stage_starts = {};  ///< first layer of each stage; empty: balanced_stage_starts
};

/// This rank's stage and the bubble of its schedule, with the last step's measured times (pipeline::report()).
struct pipeline_report {
  int stage = 0;               ///< this rank's stage
  int stages = 1;              ///< the pipeline's stages (ranks)
  index_t micro_batches = 1;   ///< micro-batches per step
  pipeline_schedule schedule = pipeline_schedule::one_forward_one_backward;  ///< the schedule in use
  nn::layer_range layers = {};  ///< the layers this stage holds
  double bubble_fraction = 0;       ///< (p - 1) / m: an ideal pipeline's idle time over its compute time
  double bubble_share_of_step = 0;  ///< (p - 1) / (m + p - 1): the same idle time over the step time
  double idle_fraction = 0;         ///< measured in the last step: time blocked waiting for a peer / step time
  double step_seconds = 0;          ///< the last step's wall time on this rank
  index_t contexts = 1;             ///< micro-batches this stage holds in flight (one set of activations each)
};

/// A trainer whose network is split over the ranks of a communicator, one stage (a run of layers) per rank,
/// each global batch cut into micro-batches that flow through the stages by the GPipe or 1F1B schedule.
template <class Sequential, class Precision, class Space, template <class, class> class Optimizer, class Communicator>
class pipeline {
 public:
  /// The whole network's type; this stage's networks hold only the stage's layers.
  using network_type = nn::network<Sequential, Precision, Space>;
  using space = Space;  ///< the memory space of parameters and activations
  static_assert(!network_type::output_split, FUSOR_SPLIT_OUTPUT_MESSAGE);

 private:
  using action = pipeline_action;
  using kind = pipeline_action::kind;
  using clock = std::chrono::steady_clock;
  // Each parameter group's update: the data-parallel engine's, over the data
  // group (one rank when there is none).
  template <class List>
  struct group_tuple;
  template <class... E>
  struct group_tuple<nn::detail::type_list<E...>> {
    using type = std::tuple<data_parallel_group<E, Space, Optimizer>...>;
  };
  using groups_type = typename group_tuple<typename network_type::group_elements>::type;
  static constexpr std::size_t group_count = std::tuple_size_v<groups_type>;
  using messages_type = pipeline_messages<network_type, Communicator>;
  using request_type = decltype(std::declval<Communicator&>().all_reduce(
      std::declval<optim::flat_view<float, Space>>(), comm::reduction_op::sum));

 public:
  /// One pipeline: `communicator` holds its stages (rank = stage), every rank
  /// steps on the whole `global_batch`.
  template <class OptimizerOptions>
  pipeline(Communicator& communicator, index_t global_batch, nn::network_options network_options,
           optim::trainer_options trainer_options, const OptimizerOptions& optimizer_options,
           pipeline_options options = {})
      : pipeline(communicator, nullptr, global_batch, std::move(network_options), trainer_options, optimizer_options,
                 std::move(options), {}) {}

  /// One of several replicas of a pipeline (data x pipeline parallelism):
  /// `stages` holds this replica's stages, `data` the ranks holding this stage
  /// in the other replicas (a mesh's pipeline() and data() groups), and
  /// `replica_batch` the rows this replica steps on (the global batch / replicas).
  /// `data_options` choose the data group's communication: bucket_bytes,
  /// communication (native or bf16) and shard_optimizer_state (ZeRO-1). The
  /// collectives start after the stage's last backward (overlap does not apply);
  /// micro-batches are pipeline_options' (leave data_options.micro_batches at 1).
  /// ZeRO-2/3 and PowerSGD are refused: a stage adds its micro-batches'
  /// gradients into one buffer of the stage's size between backwards (the
  /// schedule interleaves them), so ZeRO-2 would have to reduce-scatter after
  /// every micro-batch (m times the traffic) and ZeRO-3 gather every parameter m
  /// times in forward and again in backward; DeepSpeed refuses them with
  /// pipelines for the same reason. More stages cut memory per rank instead.
  template <class OptimizerOptions>
  pipeline(Communicator& stages, Communicator& data, index_t replica_batch, nn::network_options network_options,
           optim::trainer_options trainer_options, const OptimizerOptions& optimizer_options,
           pipeline_options options, data_parallel_options data_options = {})
      : pipeline(stages, &data, replica_batch, std::move(network_options), trainer_options, optimizer_options,
                 std::move(options), data_options) {}

 private:
  template <class OptimizerOptions>
  pipeline(Communicator& communicator, Communicator* data, index_t global_batch, nn::network_options network_options,
           optim::trainer_options trainer_options, const OptimizerOptions& optimizer_options, pipeline_options options,
           data_parallel_options data_options)
      : comm_(communicator),
        data_(data),
        options_(validated(std::move(options), communicator.size(), global_batch)),
        stage_(communicator.rank()),
        stages_(communicator.size()),
        global_batch_(global_batch),
        micro_batch_(global_batch / options_.micro_batches),
        layers_(stage_layers(options_.stage_starts, stage_, network_type::depth)),
        network_(micro_batch_, with_layers(network_options, layers_)),
        data_options_(data_checked(data_options, options_.micro_batches, data != nullptr ? data->size() : 1)),
        controller_(trainer_options.schedule, trainer_options.clip, trainer_options.scaling, trainer_options.stream),
        scaling_(trainer_options.scaling),
        groups_(make_groups(optimizer_options, trainer_options.stream, std::make_index_sequence<group_count>{})),
        actions_(pipeline_actions(options_.schedule, stage_, stages_, options_.micro_batches)),
        messages_(communicator, pipeline_contexts(options_.schedule, stage_, stages_, options_.micro_batches)),
        rank_numbers_(trainer_options.stream) {
    controller_.stop_on_nonfinite(optim::stops_on_nonfinite(trainer_options));
    check_stages_alike();
    for (index_t c = 1; c < messages_.contexts(); ++c)
      extra_contexts_.push_back(
          std::make_unique<network_type>(micro_batch_, with_layers(network_options, layers_), network_));
    // Each micro-batch's share of the global batch's mean loss (the replicas'
    // gradients are summed: the mean costs no pass).
    if (last_stage())
      loss_.emplace(micro_batch_,
                    cross_entropy_options{.grad_scale = 1.0f / float(options_.micro_batches * index_t(replicas()))},
                    trainer_options.stream);
    std::size_t buckets = 1;
    for_each_group([&](auto& g) { buckets += g.plan().buckets.size(); });
    requests_.reserve(buckets);
  }

 public:
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  /// Tensor parallelism inside the stage: `reduction` (the parallel::tensor_parallel
  /// of context 0) makes each stage's squared gradient norm global over the tensor
  /// group before the stages' norms are summed. `reduction` must outlive the steps.
  void reduce_gradient_norm_with(optim::gradient_norm_reduction<space>& reduction) { norm_reduction_ = &reduction; }
  /// fn(network&) for every context (set of activations in flight) of this stage,
  /// context 0 first; they share its parameters (to connect split layers).
  template <class Fn>
  void for_each_context(Fn&& fn) {
    fn(network_);
    for (auto& c : extra_contexts_) fn(*c);
  }

  /// Master weights and moments from the stage's current parameters (as
  /// trainer::initialize); with replicas, data rank 0's parameters first go to
  /// every replica (a collective over the data group), and under ZeRO-1 each
  /// rank's optimizer takes its shard of them.
  template <class Executor>
  void initialize(const Executor& ex) {
    if (replicas() > 1) {
      order_.communication_after_compute(*data_, ex);
      network_.for_each_group([&](auto& group) {
        if (group.size() > 0) data_->broadcast(group.values(), 0).wait();
      });
      order_.compute_after_communication(*data_, ex);
      wait_for(ex);
    }
    for_each_group([&](auto& g) { g.initialize(ex); });
    initialized_.mark();
  }

  /// One training step on the global batch: images [global batch, features...]
  /// (read on stage 0), labels [global batch] int32 (read on the last stage);
  /// other ranks may pass the same views or empty ones. Every rank must call it.
  template <class Images, class Labels, class Executor>
  void step(const Images& images, const Labels& labels, const Executor& ex) {
    const auto start = clock::now();
    messages_.reset_idle();
    require_stream(ex);
    refuse_graph_capture(ex, "fusor::parallel::pipeline::step");
    initialized_.require(optim::detail::keeps_master_weights(*this), "fusor::parallel::pipeline");
    const auto& x = as_view(images);
    const auto& y = as_view(labels);
    if (stage_ == 0) require_batch(x.extent(0), global_batch_, "images", "step");
    if (last_stage()) require_batch(y.extent(0), global_batch_, "labels", "step");
    index_t backwards = 0;
    for (const action& a : actions_) {
      network_type& net = context(a.context);
      const index_t first_row = a.micro_batch * micro_batch_;
      if (a.what == kind::forward) {
        const nn::run_mode mode{true, host_steps_, controller_.scalars().step().data(), first_row};
        messages_.receive_input(net, a, micro_batch_);
        if (stage_ == 0) net.forward(rows(x, first_row, micro_batch_), ex, mode);
        else net.forward_stage(ex, mode);
        if (last_stage()) {
          loss_->forward_backward(net.output(), rows(y, first_row, micro_batch_), net.output_gradient(), ex);
          if (scaling_.dynamic)
            assign(net.output_gradient(), net.output_gradient() * optim::scalar(controller_.scalars().loss_scale()), ex);
        }
      } else {
        messages_.receive_output_gradient(net, a);
        net.backward(ex);
        // Every backward but the step's last adds into the fp32 sum (one pass);
        // the update adds the last one as it reads the gradients.
        if (++backwards < options_.micro_batches) for_each_group([&](auto& g) { g.accumulate(backwards == 1, ex); });
      }
      messages_.send_after(net, a);
    }
    messages_.finish();
    update(ex);
    ++host_steps_;
    idle_seconds_ = messages_.idle_seconds();
    step_seconds_ = std::chrono::duration<double>(clock::now() - start).count();
    stop_note_.record(controller_.scalars(), ex);
    if (last_stage())  // the stage that reads the labels
      optim::detail::check_naming_labels([&] { check_not_stopped(); }, labels, network_.output(),
                                         loss_->options().ignore_index);
    else
      check_not_stopped();
  }

  /// Throws optim::nonfinite_error if a step had Inf/NaN gradients under
  /// nonfinite_gradients::stop (the default without a dynamic loss scale): the
  /// norm is summed over every stage, so every rank stops at the same step, each
  /// naming its own stage's first layer. As data_parallel's (on a GPU, the
  /// note of the step two before the last, the same step on every rank).
  void check_not_stopped() {
    const std::int64_t at = stop_note_.seen_in_step_order(controller_.scalars());
    if (at != 0)
      throw optim::nonfinite_error(optim::nonfinite_message("fusor::parallel::pipeline", at, network_, false), at);
  }

  /// Loss and accuracy on a batch of at most the global batch, without learning
  /// (into totals()). The batch size is read from the images or the labels where
  /// this rank has them, else it is the global batch: pass the real views on every
  /// rank when batches may be smaller. Every rank must call it.
  template <class Images, class Labels, class Executor>
  void evaluate(const Images& images, const Labels& labels, const Executor& ex) {
    check_not_stopped();
    require_stream(ex);
    const auto& x = as_view(images);
    const auto& y = as_view(labels);
    const index_t batch = x.size() > 0 ? x.extent(0) : y.size() > 0 ? y.extent(0) : global_batch_;
    if (batch < 1 || batch > global_batch_)
      throw shape_error("fusor::parallel::pipeline::evaluate: a batch of " + std::to_string(batch) +
                        " samples for a pipeline of global batch " + std::to_string(global_batch_));
    if (stage_ == 0) require_batch(x.extent(0), batch, "images", "evaluate");
    if (last_stage()) require_batch(y.extent(0), batch, "labels", "evaluate");
    for (index_t j = 0; j * micro_batch_ < batch; ++j) {
      const action a{kind::forward, j, j % messages_.contexts()};
      const index_t first_row = j * micro_batch_, count = std::min(micro_batch_, batch - first_row);
      network_type& net = context(a.context);
      messages_.receive_input(net, a, count);
      if (stage_ == 0) net.forward(rows(x, first_row, count), ex, nn::evaluation);
      else net.forward_stage(ex, nn::evaluation);
      if (last_stage()) loss_->evaluate(net.output(), rows(y, first_row, count), ex);
      messages_.send_after(net, a);
    }
    messages_.finish();
  }

  /// The loss totals since reset_totals() (steps and evaluations), from the last
  /// stage, on every rank (a broadcast: every rank must call it). With a data
  /// group they are this replica's rows only: sum over the replicas (grid.data())
  /// for the global batch's.
  nn::loss_totals totals() {
    double values[4] = {0, 0, 0, 0};
    if (last_stage()) {
      const nn::loss_totals t = loss_->totals();
      values[0] = t.mean_loss;
      values[1] = t.accuracy;
      values[2] = double(t.samples);
      values[3] = double(t.labels_outside);
    }
    if (stages_ > 1) rank_numbers_.broadcast(comm_, values, stages_ - 1);
    return {values[0], values[1], index_t(values[2]), index_t(values[3])};
  }
  /// Zeroes the loss totals (the last stage holds them; elsewhere it does nothing).
  template <class Executor>
  void reset_totals(const Executor& ex) {
    if (last_stage()) loss_->reset(ex);
  }

  /// This rank's stage, its schedule's bubble, and the last step's measured idle time.
  pipeline_report report() const {
    return {stage_,
            stages_,
            options_.micro_batches,
            options_.schedule,
            layers_,
            pipeline_bubble_fraction(stages_, options_.micro_batches),
            pipeline_bubble_share_of_step(stages_, options_.micro_batches),
            step_seconds_ > 0 ? std::min(1.0, idle_seconds_ / step_seconds_) : 0.0,
            step_seconds_,
            messages_.contexts()};
  }

  /// The stage's network (its layers only; context 0's activations).
  network_type& network() { return network_; }
  /// fn(slot, values, gradients) for each of the stage's parameters, named as in the whole network. The
  /// gradients are the step's working buffers (a micro-batch's share, or the sum the update read).
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    network_.for_each_parameter(std::forward<Fn>(fn));
  }
  /// The layers this stage holds.
  nn::layer_range layers() const { return layers_; }
  /// This rank's stage: its rank in the stages' communicator.
  int stage() const { return stage_; }
  /// The pipeline's stages: the size of the stages' communicator.
  int stages() const { return stages_; }
  /// Rows per micro-batch: the global batch / micro-batches.
  index_t micro_batch_size() const { return micro_batch_; }
  /// The per-step decisions: gradient norm and clipping, the Inf/NaN skip, loss scale, learning rate, step count.
  optim::update_controller<Space>& controller() { return controller_; }
  /// Calls of step() (skipped ones too), counted on the host.
  std::uint64_t steps_taken() const { return host_steps_; }
  /// After loading a checkpoint, the host-side step count (dropout's stream of masks).
  void set_steps_taken(std::uint64_t steps) {
    host_steps_ = steps;
    initialized_.mark();  // the loaded state holds the master weights
  }
  /// fn(parameter group, its optimizer, where the optimizer holds the group's
  /// elements) for each group this stage holds: the whole group, or under
  /// ZeRO-1 this rank's chunk of each bucket.
  template <class Fn>
  void for_each_optimizer(Fn&& fn) {
    for_each_group([&](auto& g) { fn(g.group(), g.optimizer(), g.state_layout()); });
  }
  /// The stage's parameters were overwritten (a checkpoint loaded): ZeRO-1's
  /// parameter shards follow them. The optimizer's state is left as it is.
  template <class Executor>
  void parameters_loaded(const Executor& ex) {
    for_each_group([&](auto& g) { g.take_parameter_shard(ex); });
  }
  /// Replicas of this pipeline (the data group's size; 1 without one).
  int replicas() const { return data_ != nullptr ? data_->size() : 1; }

 private:
  // Every stage must be built with the same global batch and micro-batches: else the messages between stages
  // differ in size (MPI_ERR_TRUNCATE, or a hang), far from the cause. A collective over the stages, once.
  void check_stages_alike() {
    if (stages_ == 1) return;
    const auto agree = [&](index_t mine, const char* what) {
      const rank_range r = rank_numbers_.range(comm_, double(mine));
      if (!r.same())
        throw error("fusor::parallel::pipeline: the stages were built with " + std::string(what) + " from " +
                    std::to_string(index_t(r.least)) + " to " + std::to_string(index_t(r.most)) + " (stage " +
                    std::to_string(stage_) + ": " + std::to_string(mine) + "); every stage must be built alike");
    };
    agree(global_batch_, "global batches");
    agree(options_.micro_batches, "micro-batch counts");
    // Stage maps that differ would leave layers on no stage (or on two) and train another network, silently.
    for (std::size_t k = 0; k < options_.stage_starts.size(); ++k) {
      const index_t mine = index_t(options_.stage_starts[k]);
      const rank_range r = rank_numbers_.range(comm_, double(mine));
      if (!r.same())
        throw error("fusor::parallel::pipeline: the stages were built with different stage_starts: stage " +
                    std::to_string(k) + " starts at layer " + std::to_string(index_t(r.least)) + " on some and " +
                    std::to_string(index_t(r.most)) + " on others (stage " + std::to_string(stage_) + ": " +
                    std::to_string(mine) + "); pass every stage the same map");
    }
  }

  static pipeline_options validated(pipeline_options o, int ranks, index_t global_batch) {
    if (o.micro_batches < 1 || o.micro_batches > pipeline_max_micro_batches)
      throw error("fusor::parallel::pipeline: " + std::to_string(o.micro_batches) + " micro-batches; 1 to " +
                  std::to_string(pipeline_max_micro_batches) + " are possible");
    if (global_batch < 1 || global_batch % o.micro_batches != 0)
      throw error("fusor::parallel::pipeline: the global batch of " + std::to_string(global_batch) +
                  " is not divisible by " + std::to_string(o.micro_batches) + " micro-batches");
    if (o.stage_starts.empty() && ranks >= 1 && std::size_t(ranks) <= network_type::depth)
      o.stage_starts = balanced_stage_starts(network_type::depth, ranks);
    check_stage_starts(o.stage_starts, network_type::depth, ranks);
    return o;
  }
  static nn::network_options with_layers(nn::network_options o, nn::layer_range layers) {
    o.layers = layers;
    return o;
  }
  // What the data group may do under a pipeline (see the constructor).
  static data_parallel_options data_checked(data_parallel_options o, index_t micro_batches, int replicas) {
    const char* who = "fusor::parallel::pipeline: ";
    if (o.shard_gradients || o.shard_parameters)
      throw error(std::string(who) + (o.shard_parameters ? "ZeRO-3 (shard_parameters)" : "ZeRO-2 (shard_gradients)") +
                  " over a pipeline's data group is not supported: a stage adds its micro-batches' gradients into "
                  "one buffer of the stage's size, so ZeRO-2 would reduce-scatter after every micro-batch and ZeRO-3 "
                  "gather every parameter for each micro-batch; use shard_optimizer_state (ZeRO-1), or more stages");
    if (o.communication == gradient_communication::powersgd)
      throw error(std::string(who) + "PowerSGD over a pipeline's data group is not supported; use native or bf16 "
                  "communication");
    if (o.micro_batches != 1)
      throw error(std::string(who) + "data_parallel_options::micro_batches is " + std::to_string(o.micro_batches) +
                  "; a pipeline's micro-batches are pipeline_options::micro_batches (leave the data options' at 1)");
    if (o.bucket_bytes < 1)
      throw error(std::string(who) + "bucket_bytes must be at least 1, not " + std::to_string(o.bucket_bytes));
    o.micro_batches = micro_batches;  // the fp32 sum of micro-batches lives in the groups
    if (replicas == 1) {  // nothing to send or shard: one pass per group
      o.bucket_bytes = std::numeric_limits<index_t>::max();
      o.shard_optimizer_state = false;
    }
    return o;
  }
  template <class OptimizerOptions, std::size_t... I>
  groups_type make_groups(const OptimizerOptions& o, stream_t stream, std::index_sequence<I...>) {
    const int ranks = replicas(), rank = data_ != nullptr ? data_->rank() : 0;
    return groups_type{std::tuple_element_t<I, groups_type>(
        std::get<I>(network_.groups()), reverse_layers<typename std::tuple_element_t<I, groups_type>::element_type>(),
        ranks, rank, data_options_, o, stream)...};
  }
  // The stage's layers holding parameters of type Element, last first (the order backward produces them).
  template <class Element>
  std::vector<layer_range> reverse_layers() const {
    std::vector<layer_range> ranges;
    for (std::size_t layer = layers_.last; layer-- > layers_.first;) {
      const auto [begin, end] = network_.template parameter_range<Element>(layer);
      if (end > begin) ranges.push_back({layer, begin, end});
    }
    return ranges;
  }
  // fn(data_parallel_group&) for each parameter group this stage holds.
  template <class Fn>
  void for_each_group(Fn&& fn) {
    std::apply([&](auto&... g) { ((g.group().size() > 0 ? fn(g) : void()), ...); }, groups_);
  }

  bool last_stage() const { return stage_ + 1 == stages_; }
  network_type& context(index_t c) { return c == 0 ? network_ : *extra_contexts_[std::size_t(c - 1)]; }

  template <class Executor>
  void require_stream([[maybe_unused]] const Executor& ex) const {
    if constexpr (messages_type::stream_ordered && requires { ex.stream; })
      if (ex.stream != comm_.stream())
        throw error("fusor::parallel::pipeline: the executor must run on the communicator's stream (its messages "
                    "are ordered there, the host never waits for them)");
  }
  static void require_batch(index_t got, index_t want, const char* what, const char* call) {
    if (got != want)
      throw shape_error(std::string("fusor::parallel::pipeline::") + call + ": " + what + " of " +
                        std::to_string(got) + " samples, expected " + std::to_string(want));
  }
  // Rows [first, first + count) of a contiguous row-major batch, as [count, rest].
  template <class V>
  static auto rows(const V& v, index_t first, index_t count) {
    if (!v.is_contiguous()) throw shape_error("fusor::parallel::pipeline: images and labels must be contiguous");
    const index_t row = v.size() / v.extent(0);
    if constexpr (V::rank == 1)
      return view<typename V::precision, dextents<index_t, 1>, row_major, typename V::space>(v.data() + first, count);
    else
      return view<typename V::precision, dextents<index_t, 2>, row_major, typename V::space>(v.data() + first * row,
                                                                                         count, row);
  }

  // The replicas' sum of each bucket (the fp32 sum of the micro-batches
  // first), the norm of every stage's gradients, then each group's optimizer
  // (trainer::step's order) and, under ZeRO-1, the parameters gathered back.
  template <class Executor>
  void update(const Executor& ex) {
    const bool replicated = replicas() > 1;
    for_each_group([&](auto& g) {
      for (std::size_t k = 0; k != g.plan().buckets.size(); ++k) {
        g.prepare(k, ex);
        if (!replicated) continue;
        order_.communication_after_compute(*data_, ex);
        requests_.push_back(g.reduce(k, *data_));
      }
    });
    finish_data_requests(ex);
    controller_.begin_step(ex);
    // A split stage: each rank sums its share (the replicated gradients on one
    // tensor rank only) and the tensor group adds them up.
    const auto* split = norm_reduction_ != nullptr ? norm_reduction_->replicated() : nullptr;
    if (norm_reduction_ != nullptr && split == nullptr && (sharded() || narrow()))
      throw error("fusor::parallel::pipeline: a split stage under ZeRO-1 or bf16 communication needs a norm "
                  "reduction that counts replicated gradients once (parallel::tensor_parallel does)");
    std::size_t index = 0;
    std::apply([&](auto&... g) {
      ((g.group().size() == 0 ? void()
        : split == nullptr || split->counted_here ? g.add_gradient_norm(controller_, ex)
                                                  : g.add_gradient_norm(controller_, ex, split->ranges.at(index)),
        ++index),
       ...);
    }, groups_);
    if (sharded() && replicated) {  // each replica summed its shard
      order_.communication_after_compute(*data_, ex);
      requests_.push_back(data_->all_reduce(controller_.scalars().gradient_norm_squared(), comm::reduction_op::sum));
      finish_data_requests(ex);
    }
    if (split != nullptr) norm_reduction_->sum_shares(controller_.scalars().gradient_norm_squared(), nn::executor_stream(ex));
    else if (norm_reduction_ != nullptr)
      norm_reduction_->reduce(controller_.scalars().gradient_norm_squared(), nn::executor_stream(ex));
    if (stages_ > 1) {
      auto request = comm_.all_reduce(controller_.scalars().gradient_norm_squared(), comm::reduction_op::sum);
      messages_.wait(request);
    }
    controller_.prepare_update(ex);
    for_each_group([&](auto& g) { g.update(controller_.scalars(), ex); });
    if (sharded() && replicated) {  // every replica's updated shard into every replica's parameters
      order_.communication_after_compute(*data_, ex);
      for_each_group([&](auto& g) {
        for (std::size_t k = 0; k != g.plan().buckets.size(); ++k) requests_.push_back(g.gather(k, *data_));
      });
      finish_data_requests(ex);
      for_each_group([&](auto& g) { g.finish_gather(ex); });
    }
    controller_.finish_step(ex);
  }
  // The data group's requests done (host: waited, counted as idle; stream-ordered:
  // the compute stream waits for the communicator's).
  template <class Executor>
  void finish_data_requests(const Executor& ex) {
    if (requests_.empty()) return;
    for (request_type& r : requests_) messages_.wait(r);
    order_.compute_after_communication(*data_, ex);
    requests_.clear();
  }
  bool sharded() const { return data_options_.shard_optimizer_state; }
  bool narrow() const { return data_options_.communication == gradient_communication::bf16; }

  Communicator& comm_;
  Communicator* data_;  // the replicas' data group, or nullptr
  optim::gradient_norm_reduction<space>* norm_reduction_ = nullptr;
  pipeline_options options_;
  int stage_, stages_;
  index_t global_batch_, micro_batch_;
  nn::layer_range layers_;
  network_type network_;  // context 0; the others share its parameters and gradients
  std::vector<std::unique_ptr<network_type>> extra_contexts_;
  data_parallel_options data_options_;
  optim::update_controller<Space> controller_;
  optim::loss_scaling scaling_;
  std::optional<nn::softmax_cross_entropy<Space>> loss_;  // the last stage's
  groups_type groups_;
  std::vector<action> actions_;
  messages_type messages_;
  stream_order order_;                // the data group's collectives against the compute stream
  std::vector<request_type> requests_;  // the data group's collectives in flight
  detail::rank_numbers<Space, Communicator> rank_numbers_;  // loss totals and the construction check
  std::uint64_t host_steps_ = 0;
  optim::detail::initialization_check initialized_;  // initialize() or a loaded state came before the first step
  double idle_seconds_ = 0, step_seconds_ = 0;
  optim::nonfinite_note<space> stop_note_{true};  // stopped_at_step, read in step order on every rank
};

}  // namespace fusor::parallel
