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
// each stepping on its own rows, and average_gradients_over(grid.data()): the
// accumulated gradients are averaged over the replicas before the update (one
// all-reduce per parameter group), so every replica applies the update of the
// global batch. Tensor parallelism inside a stage: a network split over the
// mesh's tensor group (nn::column_parallel / row_parallel layers), every
// context connected to it, and the tensor group making the norm global:
//   std::vector<std::unique_ptr<parallel::tensor_parallel<...>>> tp;
//   train.for_each_context([&](auto& net) { tp.push_back(std::make_unique<...>(net, grid.tensor())); });
//   train.reduce_gradient_norm_with(*tp.front());
// (then the accumulated gradients are written back into the network's buffers
// before the norm: exact in fp32, rounded once to the parameters' type otherwise).
//
// With a communicator whose calls are ordered on a CUDA stream (nccl) the
// executor must run on that stream; the host never waits for a message, so the
// measured idle time (host time blocked on a peer) is 0 there.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
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
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/state_layout.hpp"
#include "fusor/optim/trainer.hpp"
#include "fusor/optim/update_controller.hpp"
#include "fusor/parallel/pipeline_messages.hpp"
#include "fusor/parallel/pipeline_schedule.hpp"
#include "fusor/parallel/stream_order.hpp"

namespace fusor::parallel {

struct pipeline_options {
  index_t micro_batches = 4;
  pipeline_schedule schedule = pipeline_schedule::one_forward_one_backward;
  std::vector<std::size_t> stage_starts = {};  // first layer of each stage; empty: balanced_stage_starts
};

struct pipeline_report {
  int stage = 0;
  int stages = 1;
  index_t micro_batches = 1;
  pipeline_schedule schedule = pipeline_schedule::one_forward_one_backward;
  nn::layer_range layers = {};
  double bubble_fraction = 0;       // (p - 1) / m: an ideal pipeline's idle time over its compute time
  double bubble_share_of_step = 0;  // (p - 1) / (m + p - 1): the same idle time over the step time
  double idle_fraction = 0;         // measured in the last step: time blocked waiting for a peer / step time
  double step_seconds = 0;          // the last step's wall time on this rank
  index_t contexts = 1;             // micro-batches this stage holds in flight (one set of activations each)
};

template <class Sequential, class Precision, class Space, template <class, class> class Optimizer, class Communicator>
class pipeline {
 public:
  using network_type = nn::network<Sequential, Precision, Space>;
  using space = Space;

 private:
  using action = pipeline_action;
  using kind = pipeline_action::kind;
  using clock = std::chrono::steady_clock;
  template <class List>
  struct optimizer_tuple;
  template <class... E>
  struct optimizer_tuple<nn::detail::type_list<E...>> {
    using type = std::tuple<Optimizer<E, Space>...>;
  };
  using optimizers_type = typename optimizer_tuple<typename network_type::group_elements>::type;
  static constexpr std::size_t group_count = std::tuple_size_v<optimizers_type>;
  using accumulator = tensor<float, dextents<index_t, 1>, row_major, Space>;
  using messages_type = pipeline_messages<network_type, Communicator>;

 public:
  template <class OptimizerOptions>
  pipeline(Communicator& communicator, index_t global_batch, nn::network_options network_options,
           optim::trainer_options trainer_options, const OptimizerOptions& optimizer_options,
           pipeline_options options = {})
      : comm_(communicator),
        options_(validated(std::move(options), communicator.size(), global_batch)),
        stage_(communicator.rank()),
        stages_(communicator.size()),
        global_batch_(global_batch),
        micro_batch_(global_batch / options_.micro_batches),
        layers_(stage_layers(options_.stage_starts, stage_, network_type::depth)),
        network_(micro_batch_, with_layers(network_options, layers_)),
        controller_(trainer_options.schedule, trainer_options.clip, trainer_options.scaling, trainer_options.stream),
        scaling_(trainer_options.scaling),
        optimizers_(make_optimizers(optimizer_options, trainer_options.stream, std::make_index_sequence<group_count>{})),
        actions_(pipeline_actions(options_.schedule, stage_, stages_, options_.micro_batches)),
        messages_(communicator, pipeline_contexts(options_.schedule, stage_, stages_, options_.micro_batches)),
        totals_buffer_(dextents<index_t, 1>(3), trainer_options.stream) {
    for (index_t c = 1; c < messages_.contexts(); ++c)
      extra_contexts_.push_back(
          std::make_unique<network_type>(micro_batch_, with_layers(network_options, layers_), network_));
    // Each micro-batch's share of the global batch's mean loss.
    if (last_stage())
      loss_.emplace(micro_batch_, cross_entropy_options{.grad_scale = 1.0f / float(options_.micro_batches)},
                    trainer_options.stream);
    if (options_.micro_batches > 1)
      for_each_group([&](auto& group, auto&, accumulator& sum) {
        sum = accumulator(dextents<index_t, 1>(group.size()), trainer_options.stream);
      });
  }
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  // Data parallelism across pipelines: before each update the gradients are
  // averaged over `data` (the ranks holding this stage in the other replicas,
  // each stepping on its own rows). Set it before the first step; `data` must
  // outlive the steps.
  void average_gradients_over(Communicator& data) { data_ = &data; }

  // Tensor parallelism inside the stage: `reduction` (the parallel::tensor_parallel
  // of context 0) makes each stage's squared gradient norm global over the tensor
  // group before the stages' norms are summed. `reduction` must outlive the steps.
  void reduce_gradient_norm_with(optim::gradient_norm_reduction<space>& reduction) { norm_reduction_ = &reduction; }
  // fn(network&) for every context (set of activations in flight) of this stage,
  // context 0 first; they share its parameters (to connect split layers).
  template <class Fn>
  void for_each_context(Fn&& fn) {
    fn(network_);
    for (auto& c : extra_contexts_) fn(*c);
  }

  // Master weights and moments from the stage's current parameters (as trainer::initialize).
  template <class Executor>
  void initialize(const Executor& ex) {
    for_each_group([&](auto& group, auto& optimizer, accumulator&) { optimizer.initialize(group.values(), ex); });
  }

  // One training step on the global batch: images [global batch, features...]
  // (read on stage 0), labels [global batch] int32 (read on the last stage);
  // other ranks may pass the same views or empty ones. Every rank must call it.
  template <class Images, class Labels, class Executor>
  void step(const Images& images, const Labels& labels, const Executor& ex) {
    const auto start = clock::now();
    messages_.reset_idle();
    require_stream(ex);
    refuse_graph_capture(ex, "fusor::parallel::pipeline::step");
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
        accumulate_gradients(backwards++, ex);
      }
      messages_.send_after(net, a);
    }
    messages_.finish();
    update(ex);
    ++host_steps_;
    idle_seconds_ = messages_.idle_seconds();
    step_seconds_ = std::chrono::duration<double>(clock::now() - start).count();
  }

  // Loss and accuracy on a batch of at most the global batch, without learning
  // (into totals()). The batch size is read from the images or the labels where
  // this rank has them, else it is the global batch: pass the real views on every
  // rank when batches may be smaller. Every rank must call it.
  template <class Images, class Labels, class Executor>
  void evaluate(const Images& images, const Labels& labels, const Executor& ex) {
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

  // The loss totals since reset_totals() (steps and evaluations), from the last
  // stage, on every rank (a broadcast: every rank must call it).
  nn::loss_totals totals() {
    double values[3] = {0, 0, 0};
    if (last_stage()) {
      const nn::loss_totals t = loss_->totals();
      values[0] = t.mean_loss;
      values[1] = t.accuracy;
      values[2] = double(t.samples);
    }
    if (stages_ > 1) {
      const view<double, dextents<index_t, 1>, row_major, host_space> host(values, 3);
      copy(totals_buffer_.view(), host);
      comm_.broadcast(totals_buffer_.view(), stages_ - 1).wait();
      copy(host, totals_buffer_.view());
    }
    return {values[0], values[1], index_t(values[2])};
  }
  template <class Executor>
  void reset_totals(const Executor& ex) {
    if (last_stage()) loss_->reset(ex);
  }

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

  // The stage's network (its layers only) and its parameters, named as in the
  // whole network: fn(slot, values, gradients). The gradients are the last
  // micro-batch's share; the step used the sum of every micro-batch's.
  network_type& network() { return network_; }
  template <class Fn>
  void for_each_parameter(Fn&& fn) const {
    network_.for_each_parameter(std::forward<Fn>(fn));
  }
  nn::layer_range layers() const { return layers_; }
  int stage() const { return stage_; }
  int stages() const { return stages_; }
  index_t micro_batch_size() const { return micro_batch_; }
  optim::update_controller<Space>& controller() { return controller_; }
  std::uint64_t steps_taken() const { return host_steps_; }
  // After loading a checkpoint, the host-side step count (dropout's stream of masks).
  void set_steps_taken(std::uint64_t steps) { host_steps_ = steps; }
  // fn(parameter group, its optimizer, where the optimizer holds the group's
  // elements) for each group this stage holds: the whole group.
  template <class Fn>
  void for_each_optimizer(Fn&& fn) {
    for_each_group([&](auto& group, auto& optimizer, accumulator&) {
      fn(group, optimizer, optim::state_layout::whole(group.size()));
    });
  }

 private:
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
  template <class OptimizerOptions, std::size_t... I>
  optimizers_type make_optimizers(const OptimizerOptions& o, stream_t stream, std::index_sequence<I...>) {
    return optimizers_type{
        std::tuple_element_t<I, optimizers_type>(std::get<I>(network_.groups()).size(), o, stream)...};
  }
  // fn(group, optimizer, fp32 gradient sum) for each parameter group this stage holds.
  template <class Fn>
  void for_each_group(Fn&& fn) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((std::get<I>(network_.groups()).size() > 0
            ? fn(std::get<I>(network_.groups()), std::get<I>(optimizers_), accumulated_[I])
            : void()),
       ...);
    }(std::make_index_sequence<group_count>{});
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

  // After the `done`-th backward of the step: its gradients (already scaled by
  // 1 / micro-batches through the loss) summed in fp32, one pass.
  template <class Executor>
  void accumulate_gradients(index_t done, const Executor& ex) {
    const index_t m = options_.micro_batches;
    if (m == 1) return;  // the step reads the gradients themselves
    for_each_group([&](auto& group, auto&, accumulator& sum) {
      const auto g = group.gradients();
      const auto s = sum.view();
      if (done == 0) assign(s, g, ex);
      else assign(s, s + g, ex);
    });
  }
  // The norm of every stage's gradients, then each group's optimizer (trainer::step's order).
  template <class Executor>
  void update(const Executor& ex) {
    // A norm reduction (tensor parallelism) reads the network's gradient buffers:
    // the accumulated sums go back there first.
    const bool in_network = options_.micro_batches == 1 || norm_reduction_ != nullptr;
    if (options_.micro_batches > 1 && norm_reduction_ != nullptr)
      for_each_group([&](auto& group, auto&, accumulator& sum) { assign(group.gradients(), sum.view(), ex); });
    auto with_gradients = [&](auto& group, accumulator& sum, auto&& fn) {
      if (in_network) fn(group.gradients());
      else fn(sum.view());
    };
    if (data_ != nullptr && data_->size() > 1)  // the replicas' mean: the global batch's gradient
      for_each_group([&](auto& group, auto&, accumulator& sum) {
        with_gradients(group, sum, [&](const auto& g) {
          auto request = data_->all_reduce(g, comm::reduction_op::avg);
          messages_.wait(request);
        });
      });
    controller_.begin_step(ex);
    for_each_group([&](auto& group, auto&, accumulator& sum) {
      with_gradients(group, sum, [&](const auto& g) { controller_.accumulate_gradient_norm(g, ex); });
    });
    if (norm_reduction_ != nullptr)  // this stage's norm over the tensor group
      norm_reduction_->reduce(controller_.scalars().gradient_norm_squared(), nn::executor_stream(ex));
    if (stages_ > 1) {
      auto request = comm_.all_reduce(controller_.scalars().gradient_norm_squared(), comm::reduction_op::sum);
      messages_.wait(request);
    }
    controller_.prepare_update(ex);
    for_each_group([&](auto& group, auto& optimizer, accumulator& sum) {
      with_gradients(group, sum,
                     [&](const auto& g) { optimizer.step(group.values(), g, controller_.scalars(), ex); });
    });
    controller_.finish_step(ex);
  }

  Communicator& comm_;
  Communicator* data_ = nullptr;  // average_gradients_over
  optim::gradient_norm_reduction<space>* norm_reduction_ = nullptr;
  pipeline_options options_;
  int stage_, stages_;
  index_t global_batch_, micro_batch_;
  nn::layer_range layers_;
  network_type network_;  // context 0; the others share its parameters and gradients
  std::vector<std::unique_ptr<network_type>> extra_contexts_;
  optim::update_controller<Space> controller_;
  optim::loss_scaling scaling_;
  std::optional<nn::softmax_cross_entropy<Space>> loss_;  // the last stage's
  optimizers_type optimizers_;
  std::array<accumulator, group_count> accumulated_;
  std::vector<action> actions_;
  messages_type messages_;
  tensor<double, dextents<index_t, 1>, row_major, Space> totals_buffer_;
  std::uint64_t host_steps_ = 0;
  double idle_seconds_ = 0, step_seconds_ = 0;
};

}  // namespace fusor::parallel
