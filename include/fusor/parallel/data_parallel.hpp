// fusor/parallel/data_parallel.hpp — a trainer whose step spans the ranks of a
// communicator: every rank holds the whole network and trains on its slice of
// the global batch; gradients are summed over ranks in buckets, each started as
// soon as backward has produced it, so communication overlaps the rest of backward.
//
//   fusor::comm::mpi world;                                  // or comm::single, or comm::nccl (GPU)
//   nn::network<mlp, fs::fp32> net(global_batch / world.size(), {.seed = 1});
//   parallel::data_parallel<decltype(net), optim::adamw, comm::mpi> train(
//       net, world, {.schedule = ...}, optim::adamw_options{}, {.bucket_bytes = 1 << 20});
//   train.initialize(ex);                  // rank 0's parameters to every rank, optimizer state
//   train.step(images, labels, ex);        // the GLOBAL batch; this rank takes rows
//                                          //   [rank * B / ranks, (rank + 1) * B / ranks)
//   train.totals();                        // loss and accuracy over every rank (collective)
//
// Equal to optim::trainer on one rank with the whole batch, up to rounding: the
// loss's gradient is scaled by 1 / (ranks x micro_batches) (no extra pass), the
// buckets are summed over ranks, every rank applies the same update.
// data_parallel_options (data_parallel_options.hpp): bucket size, overlap on or
// off, micro-batches (gradient accumulation in fp32, communicated once, after
// the last), bf16 communication (half the bytes), PowerSGD (weight matrices as
// rank-r factors with error feedback, parallel/powersgd.hpp), ZeRO-1 (optimizer state
// sharded: reduce_scatter, update this rank's shard, all_gather; the global
// gradient norm for clipping and the Inf/NaN skip is summed over ranks), ZeRO-2
// (shard_gradients: the gradients too; each bucket's live in one of two slabs
// until its reduce_scatter has read them, so no rank holds them all; then call
// backward only through this trainer, which lends the slabs to the layers),
// ZeRO-3 (shard_parameters: the parameters too; each bucket's are all-gathered
// into one of two slabs just before its layers run in forward and again in
// backward (the last two buckets of forward stay for backward), the next
// bucket's gather in flight meanwhile; after initialize the network holds no
// parameter buffer, so run it only through this trainer).
// Under CUDA (comm::nccl) collectives run on the communicator's stream, ordered
// against the compute stream by events (parallel/stream_order.hpp); the host never waits.
//
// With tensor parallelism (a mesh's data x tensor ranks, parallel/mesh.hpp):
// split the network over the tensor group first, then train it data-parallel
// over the data group, and let the tensor group make the gradient norm global:
//   parallel::tensor_parallel tp(net, grid.tensor());
//   parallel::data_parallel<...> train(net, grid.data(), ...);
//   train.reduce_gradient_norm_with(tp);   // needed for clipping and the fp16 loss scale
// With ZeRO-1 as well: each rank sums the squares of its shard, the replicated
// gradients on tensor rank 0 only, and the data and tensor groups add them up.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fusor/comm/communicator.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/nn/loss.hpp"
#include "fusor/nn/network.hpp"
#include "fusor/optim/gradient_norm_reduction.hpp"
#include "fusor/optim/initialization_check.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/trainer.hpp"
#include "fusor/optim/update_controller.hpp"
#include "fusor/parallel/batch_rows.hpp"
#include "fusor/parallel/data_parallel_group.hpp"
#include "fusor/parallel/data_parallel_options.hpp"
#include "fusor/parallel/rank_numbers.hpp"
#include "fusor/parallel/stream_order.hpp"

namespace fusor::parallel {

/// A trainer whose step spans the ranks of `Communicator`: every rank holds the whole network and trains on
/// its rows of the global batch, the gradients summed over ranks bucket by bucket while backward runs (see the
/// file comment for micro-batches, bf16, PowerSGD and ZeRO-1/2/3).
template <class Network, template <class, class> class Optimizer, class Communicator>
class data_parallel {
  static_assert(!Network::output_split, FUSOR_SPLIT_OUTPUT_MESSAGE);

 public:
  /// The memory space of the network and of every buffer the trainer holds.
  using space = typename Network::space;
  static_assert(comm::communicator<Communicator, space>,
                "fusor: data_parallel's communicator must move the network's memory (host: comm::single or "
                "comm::mpi; device: comm::nccl)");

 private:
  template <class List>
  struct group_tuple;
  template <class... E>
  struct group_tuple<nn::detail::type_list<E...>> {
    using type = std::tuple<data_parallel_group<E, space, Optimizer>...>;
  };
  using groups_type = typename group_tuple<typename Network::group_elements>::type;
  static constexpr std::size_t group_count = std::tuple_size_v<groups_type>;
  using request_type = decltype(std::declval<Communicator&>().all_reduce(
      std::declval<optim::flat_view<float, space>>(), comm::reduction_op::sum));
  using clock = std::chrono::steady_clock;

 public:
  /// Trains `network` (which must outlive the trainer; its max_batch at least each rank's micro-batch) over
  /// `communicator`, with `options` as optim::trainer's and one Optimizer per parameter group. Throws
  /// fusor::error for options that do not combine (PowerSGD with ZeRO, ZeRO-3 with tied parameters) or sizes
  /// below 1.
  template <class OptimizerOptions>
  data_parallel(Network& network, Communicator& communicator, optim::trainer_options options,
                const OptimizerOptions& optimizer_options, data_parallel_options parallel = {})
      : network_(network),
        communicator_(communicator),
        options_(options),
        parallel_(checked(parallel)),
        controller_(options.schedule, options.clip, options.scaling, options.stream),
        loss_(network.max_batch(),
              {.grad_scale = 1.0f / float(index_t(communicator.size()) * parallel.micro_batches)}, options.stream),
        groups_(make_groups(optimizer_options, std::make_index_sequence<group_count>{})),
        rank_numbers_(options.stream) {
    controller_.stop_on_nonfinite(optim::stops_on_nonfinite(options));
    std::size_t buckets = 0, index = 0;
    for_each_group([&](auto& g) {
      buckets += g.plan().buckets.size();
      gathers_[index].resize(g.plan().buckets.size());
      request_of_[index++].resize(g.plan().buckets.size());
    });
    requests_.reserve(buckets + 1);
    timeline_.buckets.reserve(buckets);
    // ZeRO-2/3: the gradients moved to slabs; the layers bind to them from now on.
    if (parallel_.shard_gradients || parallel_.shard_parameters) network_.rebind_layers(0, Network::depth - 1);
  }
  data_parallel(const data_parallel&) = delete;
  data_parallel& operator=(const data_parallel&) = delete;

  /// Every rank gets rank 0's parameters (collective), then the optimizer's
  /// state starts from them (master weights; this rank's shard under ZeRO-1).
  template <class Executor>
  void initialize(const Executor& ex) {
    order_.communication_after_compute(communicator_, ex);
    network_.for_each_group([&](auto& group) { communicator_.broadcast(group.values(), 0).wait(); });
    wait_for(ex);
    for_each_group([&](auto& g) { g.initialize(ex); });
    if (parallel_.shard_parameters) network_.rebind_layers(0, Network::depth - 1);  // to the value slabs
    initialized_.mark();
  }

  /// One step on the GLOBAL batch (the same images and labels on every rank):
  /// this rank trains on its rows, in micro_batches pieces. Throws fusor::error on
  /// every rank where the ranks pass global batches of different sizes (checked
  /// each step over MPI, on the first step over NCCL).
  template <class Images, class Labels, class Executor>
  void step(const Images& images, const Labels& labels, const Executor& ex) {
    refuse_graph_capture(ex, "fusor::parallel::data_parallel::step");
    initialized_.require(optim::detail::keeps_master_weights(*this), "fusor::parallel::data_parallel");
    check_norm_reduction();
    const auto& x = as_view(images);
    const auto& y = as_view(labels);
    check_same_global_batch(x.extent(0));
    const index_t local = micro_batch(x.extent(0), y.extent(0));
    const auto start = clock::now();
    timeline_.buckets.clear();
    timeline_.gather_start = timeline_.gather_end = timeline_.compression_end = -1;
    const index_t first_row = index_t(communicator_.rank()) * local * parallel_.micro_batches;
    for (index_t m = 0; m < parallel_.micro_batches; ++m) {
      const index_t rows = first_row + m * local;
      forward_and_loss(detail::batch_rows(x, rows, local), detail::batch_rows(y, rows, local), rows, ex);
      if (parallel_.shard_gradients) {  // ZeRO-2: every micro-batch reduce-scatters its buckets
        backward_in_slabs(start, ex);
        if (parallel_.micro_batches > 1)
          for_each_group([&](auto& g) { g.accumulate_shard(m == 0, m + 1 == parallel_.micro_batches, ex); });
        continue;
      }
      if (m + 1 < parallel_.micro_batches) {
        network_.backward(ex);
        for_each_group([&](auto& g) { g.accumulate(m == 0, ex); });
        continue;
      }
      next_bucket_.fill(0);
      timeline_.backward_start = since(start);
      if (compressing()) {  // PowerSGD: every group's collectives after backward
        network_.backward(ex);
        timeline_.backward_end = since(start);
        for_each_group([&](auto& g) { g.compress_and_reduce(communicator_, order_, ex); });
        timeline_.compression_end = since(start);
        continue;
      }
      if (parallel_.overlap) {
        network_.backward(ex, {}, [&](std::size_t layer) {
          issue_ready(layer, start, ex);
          progress(start);
        });
      } else {
        network_.backward(ex);
      }
      timeline_.backward_end = since(start);
      issue_ready(0, start, ex);  // what is left: everything when overlap is off
    }
    if (!parallel_.shard_gradients) finish_requests(start, ex, true);

    controller_.begin_step(ex);
    // ZeRO-1 with a split network: each rank sums its share (replicated
    // gradients on one tensor rank only), the data and tensor groups add them up.
    const auto* replicated = sharded() && norm_reduction_ != nullptr ? norm_reduction_->replicated()
                                                                                           : nullptr;
    std::size_t k = 0;
    for_each_group([&](auto& g) {
      if (replicated == nullptr || replicated->counted_here) g.add_gradient_norm(controller_, ex);
      else g.add_gradient_norm(controller_, ex, replicated->ranges.at(k));
      ++k;
    });
    if (sharded()) {  // each rank summed its shard: the norm is their sum
      order_.communication_after_compute(communicator_, ex);
      requests_.push_back(communicator_.all_reduce(controller_.scalars().gradient_norm_squared(), comm::reduction_op::sum));
      finish_requests(start, ex, false);
    }
    // A split network: the tensor group makes the norm of the (reduced) gradients global.
    if (replicated != nullptr)
      norm_reduction_->sum_shares(controller_.scalars().gradient_norm_squared(), nn::executor_stream(ex));
    else if (norm_reduction_ != nullptr)
      norm_reduction_->reduce(controller_.scalars().gradient_norm_squared(), nn::executor_stream(ex));
    controller_.prepare_update(ex);
    for_each_group([&](auto& g) { g.update(controller_.scalars(), ex); });
    if (sharded() && !parallel_.shard_parameters) gather_parameters(start, ex);
    controller_.finish_step(ex);
    ++steps_;
    timeline_.step_end = since(start);
    stop_note_.record(controller_.scalars(), ex);
    optim::detail::check_naming_labels([&] { check_not_stopped(); }, labels, network_.output(),
                                       loss_.options().ignore_index);
  }

  /// Throws optim::nonfinite_error if a step had Inf/NaN gradients under
  /// nonfinite_gradients::stop (the default without a dynamic loss scale): the
  /// norm is global, so every rank stops at the same step. step() and
  /// evaluate() call it. On a GPU it reads the note of the step two before the
  /// last, waiting for that step if the GPU has not finished it: every rank
  /// reads the same step's note and throws at the same step.
  void check_not_stopped() {
    const std::int64_t at = stop_note_.seen_in_step_order(controller_.scalars());
    if (at != 0)
      throw optim::nonfinite_error(optim::nonfinite_message("fusor::parallel::data_parallel", at, network_, false), at);
  }

  /// Loss and accuracy of this rank's rows of a batch, without learning (any
  /// batch size: rank r takes rows [r * B / ranks, (r + 1) * B / ranks)).
  template <class Images, class Labels, class Executor>
  void evaluate(const Images& images, const Labels& labels, const Executor& ex) {
    check_not_stopped();
    const auto& x = as_view(images);
    const auto& y = as_view(labels);
    check_labels(x.extent(0), y.extent(0));
    const index_t n = communicator_.size(), r = communicator_.rank();
    const index_t begin = x.extent(0) * r / n, end = x.extent(0) * (r + 1) / n;
    // ZeRO-3's gathers are collectives: every rank runs as many forwards as the
    // rank with the most rows (one with none left runs a row it does not count).
    const index_t most = (x.extent(0) + n - 1) / n, batch = network_.max_batch();
    const index_t passes = parallel_.shard_parameters ? (most + batch - 1) / batch : (end - begin + batch - 1) / batch;
    for (index_t p = 0; p < passes; ++p) {
      const index_t row = begin + p * batch, rows = std::min(batch, end - row);
      const bool counted = rows > 0;
      begin_forward_gathers(ex);
      const auto logits = network_.forward(detail::batch_rows(x, counted ? row : 0, counted ? rows : 1), ex, nn::evaluation,
                                           [&](std::size_t layer) { before_forward_layer(layer, ex); });
      if (counted) loss_.evaluate(logits, detail::batch_rows(y, row, rows), ex);
    }
  }

  /// The loss's running totals summed over every rank (a collective: every rank
  /// calls it), once the steps' work is done (on the GPU: after ex.synchronize()).
  nn::loss_totals totals() {
    const nn::loss_totals mine = loss_.totals();
    double sums[4] = {mine.mean_loss * double(mine.samples), mine.accuracy * double(mine.samples), double(mine.samples),
                      double(mine.labels_outside)};
    rank_numbers_.all_reduce(communicator_, sums, comm::reduction_op::sum);
    const index_t n = static_cast<index_t>(sums[2] + 0.5);
    return {n ? sums[0] / sums[2] : 0.0, n ? sums[1] / sums[2] : 0.0, n, static_cast<index_t>(sums[3] + 0.5)};
  }

  /// Every parameter into `whole` (a network of the same layers: for
  /// evaluation elsewhere, export, or a check), on every rank: a collective.
  /// Under ZeRO-3 the shards are all-gathered (a buffer of the group's size is
  /// made for the call); otherwise the network's parameters are copied.
  template <class Executor>
  void copy_parameters_to(Network& whole, const Executor& ex) {
    if (&whole == &network_) throw error("fusor::parallel::data_parallel::copy_parameters_to: a network of its own");
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (copy_group_to(std::get<I>(groups_), std::get<I>(network_.groups()), std::get<I>(whole.groups()), ex), ...);
    }(std::make_index_sequence<group_count>{});
  }

  /// Bytes this rank holds for parameters, gradients, optimizer state and communication.
  memory_report memory() const {
    memory_report report;
    for_each_group([&](const auto& g) { g.add_memory(report); });
    return report;
  }
  /// When, within the last step, backward, each bucket's collective and the gathers ran on this rank.
  const step_timeline& timeline() const { return timeline_; }
  /// Bytes this rank hands to collectives in one step (the sizes of the buffers
  /// given to all_reduce / reduce_scatter, plus all_gather's shard and the
  /// norm's 8 bytes under ZeRO-1; under PowerSGD a compressed step's, after the
  /// warm-up). A ring all-reduce of b bytes sends 2 (n - 1) / n x b per rank.
  index_t bytes_per_step() const {
    index_t bytes = sharded() ? index_t(sizeof(double)) : 0;
    for_each_group([&](const auto& g) { bytes += g.bytes_per_step(parallel_.micro_batches); });
    return bytes;
  }
  /// The bucket plan of group I (0: the network's first element type).
  template <std::size_t I = 0>
  const bucket_plan& buckets() const { return std::get<I>(groups_).plan(); }

  /// The loss, with this rank's running totals.
  nn::softmax_cross_entropy<space>& loss() { return loss_; }
  /// The per-step decisions: gradient norm and clipping, the Inf/NaN skip, loss scale, learning rate, step count.
  optim::update_controller<space>& controller() { return controller_; }
  /// The network this trainer trains.
  Network& network() { return network_; }
  /// The communicator the step spans.
  Communicator& communicator() { return communicator_; }
  /// The data-parallel options in force (shard_gradients set where shard_parameters is).
  const data_parallel_options& options() const { return parallel_; }
  std::uint64_t steps_taken() const { return steps_; }  ///< calls of step() (skipped ones too)
  /// After loading a checkpoint: the step count (and dropout's, micro-batches per step).
  void set_steps_taken(std::uint64_t steps) {
    steps_ = steps;
    forwards_ = steps * std::uint64_t(parallel_.micro_batches);
    initialized_.mark();  // the loaded state holds the master weights
  }
  /// fn(parameter group, its optimizer, where the optimizer holds the group's
  /// elements: all of them, or this rank's shard under ZeRO-1).
  template <class Fn>
  void for_each_optimizer(Fn&& fn) {
    for_each_group([&](auto& g) { fn(g.group(), g.optimizer(), g.state_layout()); });
  }
  /// fn(parameter group, slot, E, Q) for each weight matrix PowerSGD compresses
  /// on this rank (none without PowerSGD): its error feedback (this rank's) and
  /// warm start (the same on every rank), kept by checkpoints beside the
  /// optimizer's state (parallel/distributed_checkpoint.hpp).
  template <class Fn>
  void for_each_compression_state(Fn&& fn) {
    for_each_group([&](auto& g) {
      g.for_each_compression_state([&](const nn::parameter_slot& slot, const auto& e, const auto& q) { fn(g.group(), slot, e, q); });
    });
  }
  /// Where the parameters of `group` (one of the network's) lie on this rank,
  /// for a checkpoint: the network's buffer, or under ZeRO-3 this rank's shard.
  template <class Element>
  std::pair<optim::flat_view<Element, space>, optim::state_layout> parameter_values(
      const nn::parameter_group<Element, space>& group) const {
    std::optional<std::pair<optim::flat_view<Element, space>, optim::state_layout>> found;
    for_each_group([&](const auto& g) {
      if constexpr (std::is_same_v<typename std::remove_cvref_t<decltype(g)>::element_type, Element>)
        if (&g.group() == &group) found = g.parameter_values();
    });
    if (!found) throw error("fusor::parallel::data_parallel::parameter_values: not a parameter group of this network");
    return *found;
  }
  /// The network's parameters were overwritten (a checkpoint loaded): ZeRO-1's
  /// parameter shards follow them (ZeRO-3's shard was loaded itself). The optimizer's state is left as it is.
  template <class Executor>
  void parameters_loaded(const Executor& ex) {
    for_each_group([&](auto& g) { g.take_parameter_shard(ex); });
  }

  /// Makes the squared gradient norm global over the ranks that split the
  /// network (parallel::tensor_parallel), before clipping and the Inf/NaN skip
  /// read it, every step from now on. `reduction` must outlive the steps.
  void reduce_gradient_norm_with(optim::gradient_norm_reduction<space>& reduction) { norm_reduction_ = &reduction; }

 private:
  // Whether this step's gradients go through PowerSGD (after its warm-up steps).
  bool compressing() const {
    return parallel_.communication == gradient_communication::powersgd &&
           steps_ >= std::uint64_t(parallel_.powersgd.warmup_steps);
  }
  // ZeRO-1, 2 or 3: each rank updates its shard of the parameters.
  bool sharded() const {
    return parallel_.shard_optimizer_state || parallel_.shard_gradients || parallel_.shard_parameters;
  }
  static data_parallel_options checked(data_parallel_options o) {
    const bool zero = o.shard_optimizer_state || o.shard_gradients || o.shard_parameters;
    if (o.communication == gradient_communication::powersgd && zero)
      throw error(std::string("fusor::parallel::data_parallel: PowerSGD (communication = powersgd) and ") +
                  (o.shard_parameters  ? "ZeRO-3 (shard_parameters)"
                   : o.shard_gradients ? "ZeRO-2 (shard_gradients)"
                                       : "ZeRO-1 (shard_optimizer_state)") +
                  " do not combine: PowerSGD's sum is whole on every rank; choose one");
    if (o.shard_parameters) o.shard_gradients = true;  // ZeRO-3 includes ZeRO-2
    if (o.bucket_bytes < 1)
      throw error("fusor::parallel::data_parallel: bucket_bytes must be at least 1, not " + std::to_string(o.bucket_bytes));
    if (o.micro_batches < 1)
      throw error("fusor::parallel::data_parallel: micro_batches must be at least 1, not " +
                  std::to_string(o.micro_batches));
    return o;
  }
  template <class OptimizerOptions, std::size_t... I>
  groups_type make_groups(const OptimizerOptions& optimizer_options, std::index_sequence<I...>) {
    return groups_type{std::tuple_element_t<I, groups_type>(
        std::get<I>(network_.groups()),
        reverse_layers<typename std::tuple_element_t<I, groups_type>::element_type>(), communicator_.size(),
        communicator_.rank(), parallel_, optimizer_options, options_.stream)...};
  }
  template <class Element>
  std::vector<layer_range> reverse_layers() const {
    std::vector<layer_range> ranges;
    for (std::size_t layer = Network::depth; layer-- > 0;) {
      const auto [begin, end] = network_.template parameter_range<Element>(layer);
      if (end > begin) ranges.push_back({layer, begin, end});
    }
    return ranges;
  }
  template <class Fn>
  void for_each_group(Fn&& fn) {
    std::apply([&](auto&... g) { (fn(g), ...); }, groups_);
  }
  template <class Fn>
  void for_each_group(Fn&& fn) const {
    std::apply([&](const auto&... g) { (fn(g), ...); }, groups_);
  }

  void check_labels(index_t images, index_t labels) const {
    if (images != labels)
      throw shape_error("fusor::parallel::data_parallel: a batch of " + std::to_string(images) + " images but " +
                        std::to_string(labels) + " labels");
  }
  // Each rank's micro-batch, or why the global batch does not split.
  index_t micro_batch(index_t global, index_t labels) const {
    check_labels(global, labels);
    const index_t ranks = communicator_.size(), pieces = ranks * parallel_.micro_batches;
    if (global < 1 || global % pieces != 0)
      throw error("fusor::parallel::data_parallel: a global batch of " + std::to_string(global) +
                  " samples does not split evenly over " + std::to_string(ranks) + " ranks x " +
                  std::to_string(parallel_.micro_batches) + " micro-batches (it must be a multiple of " +
                  std::to_string(pieces) + ")");
    const index_t local = global / pieces;
    if (local > network_.max_batch())
      throw error("fusor::parallel::data_parallel: each rank's micro-batch is " + std::to_string(local) +
                  " samples (global batch " + std::to_string(global) + " / (" + std::to_string(ranks) + " ranks x " +
                  std::to_string(parallel_.micro_batches) + " micro-batches)), more than the network's max_batch of " +
                  std::to_string(network_.max_batch()));
    return local;
  }

  // Every rank must pass the same global batch: different ones would train on unequal shares, silently. A
  // collective: every step over host memory (MPI: two numbers), the first step only over a stream-ordered
  // communicator (NCCL: a check every step would make the host wait for the GPU).
  void check_same_global_batch(index_t global) {
    if (stream_ordered<Communicator> && batch_checked_) return;
    batch_checked_ = true;
    const rank_range r = rank_numbers_.range(communicator_, double(global));
    if (!r.same())
      throw error("fusor::parallel::data_parallel::step: the ranks pass global batches of " +
                  std::to_string(index_t(r.least)) + " to " + std::to_string(index_t(r.most)) +
                  " samples (this rank " + std::to_string(global) +
                  "); every rank must pass the same global batch, of which it trains its rows");
  }

  // first_sample: where x lies in the global batch (dropout draws by it).
  template <class X, class Y, class Executor>
  void forward_and_loss(const X& x, const Y& y, index_t first_sample, const Executor& ex) {
    const nn::run_mode mode{true, forwards_++, controller_.scalars().step().data(), first_sample};
    begin_forward_gathers(ex);
    const auto logits = network_.forward(x, ex, mode, [&](std::size_t layer) { before_forward_layer(layer, ex); });
    const auto dlogits = network_.output_gradient();
    loss_.forward_backward(logits, y, dlogits, ex);
    if (options_.scaling.dynamic) assign(dlogits, dlogits * optim::scalar(controller_.scalars().loss_scale()), ex);
  }

  template <class Group, class Parameters, class Executor>
  void copy_group_to(Group& g, const Parameters& mine, Parameters& whole, const Executor& ex) {
    if (whole.size() != mine.size())
      throw error("fusor::parallel::data_parallel::copy_parameters_to: a network of " + std::to_string(whole.size()) +
                  " parameters of a type, this one has " + std::to_string(mine.size()));
    if (!g.gathers_values()) return copy_in_order(whole.values(), mine.values(), ex);
    using element = typename Group::element_type;
    const auto staging = optim::detail::zero_tensor<element, space>(g.plan().padded_size, executor_stream(ex));
    order_.communication_after_compute(communicator_, ex);
    for (std::size_t k = 0; k != g.plan().buckets.size(); ++k) g.gather_whole(k, staging.view(), communicator_).wait();
    order_.compute_after_communication(communicator_, ex);
    g.unpack_whole(staging.view(), whole.values(), ex);
    wait_for(ex);
  }

  // ZeRO-3, forward: bucket B-1's gather (the lowest layers') starts here;
  // before_forward_layer waits for a bucket's as its first layer comes, binds
  // its layers to the slab and starts the next bucket's gather.
  template <class Executor>
  void begin_forward_gathers(const Executor& ex) {
    if (!parallel_.shard_parameters) return;
    std::size_t index = 0;
    for_each_group([&](auto& g) {
      forward_next_[index] = g.plan().buckets.size();
      if (forward_next_[index] > 0) start_gather(g, index, forward_next_[index] - 1, ex);
      ++index;
    });
  }
  template <class Executor>
  void before_forward_layer(std::size_t layer, const Executor& ex) {
    if (!parallel_.shard_parameters) return;
    std::size_t index = 0;
    for_each_group([&](auto& g) {
      std::size_t& next = forward_next_[index];  // buckets [0, next) are still to come
      if (next > 0 && g.plan().buckets[next - 1].lowest_layer <= layer) {
        const std::size_t k = --next;
        finish_gather(g, index, k, ex);
        network_.rebind_layers(g.plan().buckets[k].lowest_layer, g.plan().buckets[k].highest_layer);
        if (k > 0) start_gather(g, index, k - 1, ex);  // into the slab of bucket k + 1, whose layers are done
      }
      ++index;
    });
  }
  // ZeRO-3: bucket k's gather, after the compute queued so far (which read the slab).
  template <class Group, class Executor>
  void start_gather(Group& g, std::size_t index, std::size_t k, const Executor& ex) {
    order_.communication_after_compute(communicator_, ex);
    (void)gathers_[index][k].emplace(g.gather_values(k, communicator_));
    order_.mark(communicator_, ex, value_mark(index, k));
  }
  // ZeRO-3: bucket k's parameters are there (the compute stream waits for its
  // gather) and its layers read them from its slab.
  template <class Group, class Executor>
  void finish_gather(Group& g, std::size_t index, std::size_t k, const Executor& ex) {
    if (!gathers_[index][k])
      throw error("fusor::parallel::data_parallel: ZeRO-3 bucket " + std::to_string(k) + " used before its gather");
    order_.compute_after_mark(communicator_, ex, value_mark(index, k));
    if constexpr (!stream_ordered<Communicator>) gathers_[index][k]->wait();
    gathers_[index][k].reset();
    g.lend_values(k);
  }
  static std::size_t value_mark(std::size_t index, std::size_t k) { return 2 * group_count + 2 * index + k % 2; }

  // ZeRO-2: one micro-batch's backward, its gradients written bucket by bucket
  // into the slabs and reduce-scattered as each bucket is done; returns with
  // every collective done (on the GPU: the compute stream waits for them).
  template <class Executor>
  void backward_in_slabs(clock::time_point start, const Executor& ex) {
    next_bucket_.fill(0);
    timeline_.buckets.clear();
    for_each_group([&](auto& g) {
      if (!g.plan().buckets.empty()) lend(g, 0, ex);
    });
    timeline_.backward_start = since(start);
    network_.backward(ex, {}, [&](std::size_t layer) {
      issue_ready(layer, start, ex);
      progress(start);
    });
    timeline_.backward_end = since(start);
    issue_ready(0, start, ex);
    finish_requests(start, ex, true);
  }
  template <class Group, class Executor>
  void lend(Group& g, std::size_t k, const Executor& ex) {
    g.lend_bucket(k, ex);
    network_.rebind_layers(g.plan().buckets[k].lowest_layer, g.plan().buckets[k].highest_layer);
  }

  // Starts every bucket whose lowest layer is at or above `layer` (backward is
  // done with them). ZeRO-2: then lends the next bucket its slab, once the
  // collective that read that slab before (two buckets back) is done.
  template <class Executor>
  void issue_ready(std::size_t layer, clock::time_point start, const Executor& ex) {
    std::size_t index = 0;
    for_each_group([&](auto& g) {
      std::size_t& k = next_bucket_[index];
      for (; k < g.plan().buckets.size() && g.plan().buckets[k].lowest_layer >= layer; ++k) {
        g.prepare(k, ex);
        order_.communication_after_compute(communicator_, ex);
        request_of_[index][k] = requests_.size();
        requests_.push_back(g.reduce(k, communicator_));
        const gradient_bucket& b = g.plan().buckets[k];
        timeline_.buckets.push_back({index, k, b.lowest_layer, b.highest_layer, g.communicated_bytes(k), since(start), -1});
        if (!g.lends_gradients()) continue;
        const std::size_t slab = 2 * index + k % 2, next_slab = 2 * index + (k + 1) % 2;
        order_.mark(communicator_, ex, slab);
        if (!parallel_.overlap) wait_request(request_of_[index][k], start);
        if (k + 1 == g.plan().buckets.size()) continue;
        if (k >= 1) {  // bucket k - 1 read the next bucket's slab
          order_.compute_after_mark(communicator_, ex, next_slab);
          if constexpr (!stream_ordered<Communicator>) wait_request(request_of_[index][k - 1], start);
        }
        // ZeRO-3: bucket k + 1's parameters (buckets 0 and 1 are still there from forward), and
        // bucket k + 2's gather into bucket k's value slab, whose backward is done.
        if (g.gathers_values() && k + 1 >= 2) finish_gather(g, index, k + 1, ex);
        lend(g, k + 1, ex);
        if (g.gathers_values() && k + 2 < g.plan().buckets.size()) start_gather(g, index, k + 2, ex);
      }
      ++index;
    });
  }
  // Host: blocks until request i is done (noted in the timeline).
  void wait_request(std::size_t i, clock::time_point start) {
    if constexpr (!stream_ordered<Communicator>) {
      requests_[i].wait();
      if (timeline_.buckets[i].completed < 0) timeline_.buckets[i].completed = since(start);
    }
  }
  // Lets the communicator progress (MPI moves data inside its calls) and notes what has finished.
  void progress(clock::time_point start) {
    for (std::size_t i = 0; i != requests_.size(); ++i)
      if (timeline_.buckets[i].completed < 0 && requests_[i].test()) timeline_.buckets[i].completed = since(start);
  }
  // Host: waits for every request in flight. Stream-ordered: the compute stream
  // waits for the communicator's (nothing blocks the host). `buckets`: the
  // requests are the gradient buckets' (their completion goes in the timeline).
  template <class Executor>
  void finish_requests(clock::time_point start, const Executor& ex, bool buckets) {
    if constexpr (stream_ordered<Communicator>) {
      if (buckets) progress(start);
      order_.compute_after_communication(communicator_, ex);
    } else {
      for (std::size_t i = 0; i != requests_.size(); ++i) {
        requests_[i].wait();
        if (buckets && timeline_.buckets[i].completed < 0) timeline_.buckets[i].completed = since(start);
      }
    }
    requests_.clear();
  }
  template <class Executor>
  void gather_parameters(clock::time_point start, const Executor& ex) {
    order_.communication_after_compute(communicator_, ex);
    timeline_.gather_start = since(start);
    for_each_group([&](auto& g) {
      for (std::size_t k = 0; k != g.plan().buckets.size(); ++k) requests_.push_back(g.gather(k, communicator_));
    });
    finish_requests(start, ex, false);
    timeline_.gather_end = since(start);
    for_each_group([&](auto& g) { g.finish_gather(ex); });
  }
  static double since(clock::time_point start) { return std::chrono::duration<double>(clock::now() - start).count(); }

  Network& network_;
  Communicator& communicator_;
  optim::trainer_options options_;
  data_parallel_options parallel_;
  optim::update_controller<space> controller_;
  nn::softmax_cross_entropy<space> loss_;
  groups_type groups_;
  detail::rank_numbers<space, Communicator> rank_numbers_;  // loss totals and the batch check
  stream_order order_;
  std::vector<request_type> requests_;
  std::array<std::size_t, group_count> next_bucket_{};
  std::array<std::vector<std::size_t>, group_count> request_of_;  // this step's request index of each bucket
  std::array<std::vector<std::optional<request_type>>, group_count> gathers_;  // ZeRO-3: each bucket's gather in flight
  std::array<std::size_t, group_count> forward_next_{};                        // ZeRO-3: buckets forward has yet to reach
  step_timeline timeline_;
  std::uint64_t steps_ = 0;
  optim::detail::initialization_check initialized_;  // initialize() or a loaded state came before the first step
  bool batch_checked_ = false;  // check_same_global_batch ran (enough over a stream-ordered communicator)
  optim::nonfinite_note<space> stop_note_{true};  // stopped_at_step, read in step order on every rank
  optim::gradient_norm_reduction<space>* norm_reduction_ = nullptr;

  // The most ways a layer of the network is split (tensor parallelism): a
  // property of its type, so a fold over the layer types.
  static constexpr int split_ways = [] {
    int ways = 1;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((ways = std::max(ways, [] {
          if constexpr (requires { Network::template layer_type<I>::shard_ways; })
            return int(Network::template layer_type<I>::shard_ways);
          else return 1;
        }())),
       ...);
    }(std::make_index_sequence<Network::depth>{});
    return ways;
  }();
  void check_norm_reduction() const {
    const bool by_norm = options_.clip.max_norm > 0.0f || options_.scaling.dynamic;
    if (!by_norm || split_ways == 1) return;
    if (norm_reduction_ == nullptr)
      throw error("fusor::parallel::data_parallel: the network's layers are split " + std::to_string(split_ways) +
                  " ways (tensor parallelism), so clipping and the loss scale's Inf/NaN skip need the norm of every "
                  "rank's gradients: call reduce_gradient_norm_with(tp) with the parallel::tensor_parallel before "
                  "the first step");
    if (sharded() && norm_reduction_->replicated() == nullptr)
      throw error("fusor::parallel::data_parallel: ZeRO-1 (shard_optimizer_state) with a split network needs a norm "
                  "reduction that names the replicated gradients (parallel::tensor_parallel does)");
  }
  std::uint64_t forwards_ = 0;  // training forwards (micro-batches): dropout's host-side step
};

}  // namespace fusor::parallel
