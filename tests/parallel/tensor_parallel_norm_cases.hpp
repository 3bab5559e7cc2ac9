// tests/parallel/tensor_parallel_norm_cases.hpp — the global gradient norm of a
// tensor-parallel network (tensor_parallel as the trainer's
// gradient_norm_reduction): which gradients count once, and training with
// clipping in effect (and fp16's dynamic loss scale, with skipped steps) that
// follows the unsplit network's, every rank taking the same decisions and
// keeping the replicated parameters bit for bit equal.
#pragma once

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "parallel/tensor_parallel_checks.hpp"

namespace tensor_parallel_test {

// The split slots are the column layers' weights and biases and the row
// layers' weights; the row layers' biases (and the padding) are replicated.
// One way: nothing is split.
template <int Ways, class Space, class Communicator>
void check_replicated_ranges(Communicator& c) {
  nn::network<mlp<column<Ways>, row<Ways>>, fp32, Space> net(batch, {.seed = 2});
  parallel::tensor_parallel tp(net, c);
  const std::set<std::string> split_names =
      Ways > 1 ? std::set<std::string>{"0.weight", "0.bias", "1.weight", "2.weight", "2.bias", "3.weight"}
               : std::set<std::string>{};
  const auto& group = net.template group<float>();
  const auto& ranges = tp.norm().replicated_ranges();
  CHECK(ranges.size() == 1);  // one group: fp32
  if (ranges.size() != 1) return;
  const auto replicated = [&](index_t i) {
    return std::any_of(ranges[0].begin(), ranges[0].end(), [&](const auto& r) { return r.first <= i && i < r.second; });
  };
  index_t split_elements = 0;
  for (const nn::parameter_slot& slot : group.slots()) {
    const bool split = split_names.contains(slot.name);
    if (split) split_elements += slot.size;
    index_t counted = 0;
    for (index_t i = slot.offset; i < slot.offset + slot.size; ++i) counted += replicated(i);
    CHECK_MESSAGE(counted == (split ? 0 : slot.size), slot.name, ": ", counted, " of ", slot.size,
                  " elements counted as replicated");
  }
  CHECK(tp.norm().split_elements() == split_elements);
  for (const auto& [begin, end] : ranges[0]) CHECK((0 <= begin && begin < end && end <= group.size()));
}

struct clipped_case {
  float max_norm = 0.05f;
  fusor::optim::loss_scaling scaling = {};
  int steps = 4;
  double tolerance = 2e-5;
  bool elementwise = true;  // parameters element by element (else in norm)
};

// Every rank's copy of a device- or host-resident scalar, in rank order.
template <class Communicator, class T, class Space>
std::vector<double> every_rank(Communicator& c, const fusor::optim::scalar_view<T, Space>& value) {
  tensor<T, flat, row_major, Space> all(flat{c.size()});
  c.all_gather(value, all).wait();
  return host_values(all);
}

// Trains the split network (its trainer reducing the norm through tp) and the
// unsplit one on the same batches, clipping in effect on every step; after each
// step every rank holds the same norm and multiplier, and the norm is the
// unsplit network's; at the end the parameters are the unsplit network's and
// the replicated ones equal on every rank (expect_same_parameters).
template <int Ways, template <class, class> class Optimizer, class Precision, class Space, class Communicator,
          class Executor, class OptimizerOptions>
void check_clipped_training(Communicator& c, const Executor& ex, const OptimizerOptions& optimizer_options,
                            float learning_rate, const clipped_case& k) {
  using split_t = nn::network<mlp<column<Ways>, row<Ways>>, Precision, Space>;
  using whole_t = nn::network<mlp<unsplit, unsplit>, Precision, Space>;
  split_t split(batch, {.seed = 9});
  parallel::tensor_parallel tp(split, c);
  whole_t whole(batch, {.seed = 9});
  const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(learning_rate),
                                              .clip = {k.max_norm},
                                              .scaling = k.scaling,
                                              .stream = nn::executor_stream(ex)};
  fusor::optim::trainer<split_t, Optimizer> train_split(split, options, optimizer_options);
  fusor::optim::trainer<whole_t, Optimizer> train_whole(whole, options, optimizer_options);
  train_split.reduce_gradient_norm_with(tp);
  train_split.initialize(ex);
  train_whole.initialize(ex);
  double largest_clip = 0, largest_norm_difference = 0;
  for (int s = 0; s < k.steps; ++s) {
    INFO("step ", s);
    const float scale = train_whole.controller().scalars().read_loss_scale();
    const auto x = random_tensor<Precision, input_extents, Space>(input_extents(batch), 300 + std::uint32_t(s));
    const auto labels = random_labels<Space>(batch, 32, 400 + std::uint32_t(s));
    train_split.step(x, labels, ex);
    train_whole.step(x, labels, ex);
    wait_for(ex);
    const fusor::optim::step_values got = train_split.controller().scalars().read();
    const fusor::optim::step_values want = train_whole.controller().scalars().read();
    const auto norms = every_rank(c, train_split.controller().scalars().gradient_norm_squared());
    const auto multipliers = every_rank(c, train_split.controller().scalars().gradient_multiplier());
    for (int r = 1; r < c.size(); ++r) {
      CHECK_MESSAGE((norms[std::size_t(r)] == norms[0] || (std::isnan(norms[std::size_t(r)]) && std::isnan(norms[0]))),
                    "rank ", r, "'s squared norm ", norms[std::size_t(r)], " is not rank 0's ", norms[0]);
      CHECK_MESSAGE(multipliers[std::size_t(r)] == multipliers[0], "rank ", r, "'s gradient multiplier ",
                    multipliers[std::size_t(r)], " is not rank 0's ", multipliers[0]);
    }
    CHECK(got.skip == want.skip);
    if (want.skip != 0.0f) continue;
    const double difference = std::fabs(got.gradient_norm_squared - want.gradient_norm_squared) /
                              want.gradient_norm_squared;
    largest_norm_difference = std::max(largest_norm_difference, difference);
    CHECK_MESSAGE(difference <= k.tolerance, "squared norm ", got.gradient_norm_squared, ", unsplit ",
                  want.gradient_norm_squared);
    const double clip = double(want.gradient_multiplier) * scale;  // multiplier = clip / loss scale
    largest_clip = std::max(largest_clip, clip);
    CHECK(std::fabs(got.gradient_multiplier - want.gradient_multiplier) <= k.tolerance * want.gradient_multiplier);
  }
  const fusor::optim::step_values got = train_split.controller().scalars().read();
  const fusor::optim::step_values want = train_whole.controller().scalars().read();
  if (c.rank() == 0)
    MESSAGE(c.size(), " ranks, ", sizeof(storage_t<Precision>) * 8, "-bit: ", want.step, " of ", k.steps,
            " steps taken, loss scale ", want.loss_scale, "; largest clip coefficient ", largest_clip,
            ", largest relative difference of the squared norm from the unsplit network's ", largest_norm_difference);
  CHECK_MESSAGE((largest_clip > 0 && largest_clip < 1), "clipping is not in effect: largest coefficient ",
                largest_clip);
  CHECK(got.step == want.step);
  CHECK(got.loss_scale == want.loss_scale);
  if (k.scaling.dynamic) {
    CHECK_MESSAGE(want.step < k.steps, "no step was skipped: the overflow path is not tested");
    CHECK_MESSAGE(want.step > 0, "every step was skipped");
  }
  expect_same_parameters(c, split, whole, k.tolerance, false, "clipped, after " + std::to_string(k.steps) + " steps:",
                         k.elementwise);
}

// Clipping (or fp16's loss scale) on a split network without the reduction is
// refused at the first step, naming the call that is missing.
template <int Ways, class Space, class Communicator, class Executor>
void check_reduction_required(Communicator& c, const Executor& ex) {
  using network_t = nn::network<mlp<column<Ways>, row<Ways>>, fp32, Space>;
  network_t net(batch, {.seed = 4});
  parallel::tensor_parallel tp(net, c);
  fusor::optim::trainer<network_t, fusor::optim::sgd> train(net, {.clip = {1.0f}}, fusor::optim::sgd_options{});
  train.initialize(ex);
  const auto x = random_tensor<fp32, input_extents, Space>(input_extents(batch), 51);
  const auto labels = random_labels<Space>(batch, 32, 52);
  const std::string ways = "split " + std::to_string(Ways) + " ways";
  expect_error<fusor::error>([&] { train.step(x, labels, ex); }, {ways.c_str(), "reduce_gradient_norm_with"});
  train.reduce_gradient_norm_with(tp);
  train.step(x, labels, ex);
  wait_for(ex);
  CHECK(train.steps_taken() == 1);  // the refused step had not started
}

// Every case of the norm at the communicator's size.
template <int Ways, class Space, class Communicator, class Executor>
void check_global_norm(Communicator& c, const Executor& ex) {
  check_replicated_ranges<Ways, Space>(c);
  const fusor::optim::sgd_options sgd{.momentum = 0.9f, .weight_decay = 0.01f};
  check_clipped_training<Ways, fusor::optim::sgd, fp32, Space>(c, ex, sgd, 0.05f, {});
  const fusor::optim::adamw_options adamw{.weight_decay = 0.01f};
  check_clipped_training<Ways, fusor::optim::adamw, fp32, Space>(c, ex, adamw, 1e-2f,
                                                                  {.tolerance = 1e-4, .elementwise = false});
  // fp16: the scale starts too large (the first steps overflow and are skipped
  // on every rank) and grows after two clean steps.
  check_clipped_training<Ways, fusor::optim::adamw, fp16, Space>(
      c, ex, adamw, 1e-2f,
      {.scaling = {.dynamic = true, .initial_scale = 1048576.0f, .growth_interval = 2}, .steps = 8,
       .tolerance = 2e-2, .elementwise = false});
  if constexpr (Ways > 1) check_reduction_required<Ways, Space>(c, ex);
}

}  // namespace tensor_parallel_test
