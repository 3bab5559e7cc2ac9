// tests/parallel/nonfinite_checks.hpp — Inf/NaN gradients under data and
// pipeline parallelism (issue 15), over any host communicator: a NaN pixel in
// one rank's rows of step 3 stops every rank at step 3 with
// optim::nonfinite_error (the norm is global), the parameters stay those after
// step 2 on every rank, evaluation refuses too; with nonfinite_gradients::skip
// that step changes nothing and training goes on. Labels outside the classes
// stop training too, and the ranks that read them count them in the message.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/parallel/data_parallel.hpp>
#include <fusor/parallel/pipeline.hpp>

#include "support/fusor_test.hpp"

namespace nonfinite_test {

using namespace fusor_test;
namespace nn = fusor::nn;
namespace optim = fusor::optim;
namespace parallel = fusor::parallel;

using mlp = nn::sequential<nn::features<6>, nn::linear<6, 8, nn::relu>, nn::linear<8, 8, nn::tanh_activation>,
                           nn::linear<8, 3>>;
constexpr index_t global_batch = 12;
using images_t = tensor<float, extents<index_t, dynamic, 6>, row_major, host_space>;
using labels_t = tensor<std::int32_t, dextents<index_t, 1>, row_major, host_space>;

struct batch_data {
  images_t images{global_batch};
  labels_t labels{dextents<index_t, 1>(global_batch)};
};
// Step `step`'s global batch; `poisoned`: row `row` holds a NaN pixel.
inline batch_data batch_of(int step, bool poisoned, index_t row) {
  batch_data b;
  fill_random(b.images, std::uint32_t(40 + step));
  std::mt19937 rng{std::uint32_t(step)};
  for (index_t i = 0; i < global_batch; ++i) b.labels.data()[i] = std::int32_t(rng() % 3);
  if (poisoned) b.images.data()[row * 6 + 2] = std::numeric_limits<float>::quiet_NaN();
  return b;
}

template <class Trainer>
std::vector<float> parameters_of(Trainer& t) {
  std::vector<float> all;
  t.network().for_each_parameter([&](const nn::parameter_slot&, const auto& values, const auto&) {
    all.insert(all.end(), values.data(), values.data() + values.size());
  });
  return all;
}

// Steps 1, 2 clean, step 3 poisoned in the last rank's rows; stop or skip.
template <class Trainer, class StepFn>
void check_stop_and_skip(Trainer& train, StepFn&& step, bool stop, const std::string& who) {
  for (int s = 1; s <= 2; ++s) step(batch_of(s, false, 0));
  const std::vector<float> before = parameters_of(train);
  std::string message;
  std::int64_t stopped_at = 0;
  try {
    step(batch_of(3, true, global_batch - 1));
  } catch (const optim::nonfinite_error& e) {
    message = e.what();
    stopped_at = e.step;
  }
  CHECK(parameters_of(train) == before);  // bit for bit, on every rank
  if (!stop) {
    CHECK(message.empty());
    step(batch_of(4, false, 0));
    CHECK(parameters_of(train) != before);  // training went on
    return;
  }
  INFO(message);
  CHECK(stopped_at == 3);
  CHECK(message.find(who + ": step 3 had Inf or NaN gradients") != std::string::npos);
  CHECK(message.find("the parameters are those after step 2") != std::string::npos);
  bool again = false;
  try {
    step(batch_of(4, false, 0));
  } catch (const optim::nonfinite_error& e) {
    again = e.step == 3;
  }
  CHECK(again);
  CHECK(parameters_of(train) == before);
}

// Step 1 clean, step 2's global batch with two labels outside the 3 classes (7 at row 4, -2 at row 9): every rank
// stops at step 2; the ranks that read the labels (`names_labels`) count them in the message.
template <class Trainer, class StepFn>
void check_labels_named([[maybe_unused]] Trainer& train, StepFn&& step, bool names_labels) {
  step(batch_of(1, false, 0));
  batch_data bad = batch_of(2, false, 0);
  bad.labels.data()[4] = 7;
  bad.labels.data()[9] = -2;
  std::string message;
  try {
    step(bad);
  } catch (const optim::nonfinite_error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("step 2 had Inf or NaN gradients") != std::string::npos);
  const bool named = message.find("2 of 12 are outside the classes [0, 3)") != std::string::npos &&
                     message.find("the first is 7, element 4") != std::string::npos;
  CHECK(named == names_labels);
}

template <class Communicator>
void check_data_parallel(Communicator& comm, int zero_stage, bool stop) {
  INFO("data_parallel, ZeRO stage ", zero_stage, ", ", (stop ? std::string("stop") : std::string("skip")), ", rank ",
       comm.rank(), " of ", comm.size());
  using network_t = nn::network<mlp, fp32, host_space>;
  using trainer_t = parallel::data_parallel<network_t, optim::adamw, Communicator>;
  const auto make = [&](network_t& net, optim::nonfinite_gradients on_nonfinite) {
    auto t = std::make_unique<trainer_t>(
        net, comm,
        optim::trainer_options{.schedule = optim::learning_rate_schedule::constant(1e-2f),
                               .on_nonfinite = on_nonfinite},
        optim::adamw_options{},
        parallel::data_parallel_options{.bucket_bytes = 64, .shard_optimizer_state = zero_stage == 1,
                                        .shard_gradients = zero_stage == 2});
    t->initialize(host_executor{});
    return t;
  };
  const auto step_of = [](trainer_t& t) {
    return [&t](const batch_data& b) { t.step(b.images, b.labels, host_executor{}); };
  };
  network_t net(global_batch / comm.size(), {.seed = 5});
  const auto train = make(net, stop ? optim::nonfinite_gradients::automatic : optim::nonfinite_gradients::skip);
  check_stop_and_skip(*train, step_of(*train), stop, "fusor::parallel::data_parallel");
  if (!stop) return;
  bool refused = false;
  const batch_data b = batch_of(5, false, 0);
  try {
    train->evaluate(b.images, b.labels, host_executor{});
  } catch (const optim::nonfinite_error&) {
    refused = true;
  }
  CHECK(refused);
  // Every rank is given the global batch, so every rank names the labels.
  network_t fresh(global_batch / comm.size(), {.seed = 5});
  const auto labelled = make(fresh, optim::nonfinite_gradients::stop);
  check_labels_named(*labelled, step_of(*labelled), true);
}

template <class Communicator>
void check_pipeline(Communicator& comm, bool stop) {
  INFO("pipeline, ", (stop ? std::string("stop") : std::string("skip")), ", stage ", comm.rank(), " of ", comm.size());
  using pipeline_t = parallel::pipeline<mlp, fp32, host_space, optim::adamw, Communicator>;
  const auto make = [&](optim::nonfinite_gradients on_nonfinite) {
    auto t = std::make_unique<pipeline_t>(
        comm, global_batch, nn::network_options{.seed = 5},
        optim::trainer_options{.schedule = optim::learning_rate_schedule::constant(1e-2f),
                               .on_nonfinite = on_nonfinite},
        optim::adamw_options{}, parallel::pipeline_options{.micro_batches = 2});
    t->initialize(host_executor{});
    return t;
  };
  // Stage 0 reads the images, the last stage the labels; the others are given empty views.
  const auto step_of = [](pipeline_t& t) {
    return [&t](const batch_data& b) {
      const bool first = t.stage() == 0, last = t.stage() + 1 == t.stages();
      using images_view = decltype(b.images.view());
      using labels_view = decltype(b.labels.view());
      t.step(first ? b.images.view() : images_view{}, last ? b.labels.view() : labels_view{}, host_executor{});
    };
  };
  const auto train = make(stop ? optim::nonfinite_gradients::stop : optim::nonfinite_gradients::skip);
  check_stop_and_skip(*train, step_of(*train), stop, "fusor::parallel::pipeline");
  if (!stop) return;
  const auto labelled = make(optim::nonfinite_gradients::stop);
  check_labels_named(*labelled, step_of(*labelled), labelled->stage() + 1 == labelled->stages());
}

template <class Communicator>
void check_parallel_cases(Communicator& comm) {
  for (bool stop : {true, false}) {
    for (int zero : {0, 1, 2}) check_data_parallel(comm, zero, stop);
    if (std::size_t(comm.size()) <= 3) check_pipeline(comm, stop);  // 3 layers: up to 3 stages
  }
}

}  // namespace nonfinite_test
