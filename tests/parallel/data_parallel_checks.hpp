// tests/parallel/data_parallel_checks.hpp — what the data-parallel tests share,
// whatever the communicator (comm::single, comm::mpi, comm::nccl): a small MLP
// with a parameter-free layer in the middle, the batches of each step (the same
// on every rank, seeded by the step), data-parallel training and its reference,
// optim::trainer on ONE rank over the whole global batch, run inside the same job.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <fusor/nn/activation.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/sgd.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/parallel/data_parallel.hpp>

#include "support/fusor_test.hpp"

namespace dp_test {

using namespace fusor_test;
namespace nn = fusor::nn;
namespace optim = fusor::optim;
namespace parallel = fusor::parallel;

// Layer 1 (relu) has no parameters: buckets must skip it. Parameters (32-element
// slots): layer 0: 640 + 32, layer 2: 768 + 32, layer 3: 128 + 32 (1632 floats).
using mlp = nn::sequential<nn::features<20>, nn::linear<20, 32>, nn::relu, nn::linear<32, 24, nn::relu>,
                           nn::linear<24, 5>>;
using network_t = nn::network<mlp, fp32, space>;
inline constexpr index_t layer_sizes[3] = {672, 800, 160};  // layers 0, 2, 3
inline constexpr index_t global_batch = 48;                  // splits over 1..4 ranks x 1..2 micro-batches
inline constexpr std::uint64_t seed = 7;

using image_tensor = space_tensor<float, dextents<index_t, 2>>;
using label_tensor = space_tensor<std::int32_t, dextents<index_t, 1>>;

struct batch {
  image_tensor images;
  label_tensor labels;
};

// Step s's batch: images uniform in [-2, 2), labels in [0, 5); every rank makes the same.
inline batch make_batch(int step, index_t rows = global_batch) {
  host_tensor<float, dextents<index_t, 2>> images{dextents<index_t, 2>(rows, 20)};
  host_tensor<std::int32_t, dextents<index_t, 1>> labels{dextents<index_t, 1>(rows)};
  fill_random(images, 1000 + std::uint32_t(step));
  std::mt19937 rng(2000 + std::uint32_t(step));
  for (index_t i = 0; i < rows; ++i) labels.data()[i] = std::int32_t(rng() % 5);
  return {to_space(images), to_space(labels)};
}

template <class Network>
std::vector<double> parameters_of_any(Network& net) {
  const auto host = to_host(net.template group<float>().values());
  return std::vector<double>(host.data(), host.data() + host.size());
}
inline std::vector<double> parameters_of(network_t& net) { return parameters_of_any(net); }

struct run_result {
  std::vector<double> parameters;
  parallel::step_timeline timeline;
  parallel::memory_report memory;
  index_t bytes_per_step = 0;
  nn::loss_totals totals;
  nn::loss_totals evaluated;  // a batch of 50 (uneven over ranks) after training
  double gradient_norm_squared = 0;
};

inline optim::trainer_options trainer_options(float learning_rate = 1e-2f, float max_norm = 0.0f) {
  return {.schedule = optim::learning_rate_schedule::constant(learning_rate), .clip = {.max_norm = max_norm}};
}

// Trains `steps` steps, then evaluates a batch of 50 (uneven over ranks):
// parameters, totals and the last norm into r. `totals()` reads the loss's
// totals (over every rank for data_parallel).
template <class Trainer, class Totals>
void train_and_evaluate(Trainer& train, network_t& net, int steps, Totals&& totals, run_result& r, executor ex) {
  train.initialize(ex);
  train.loss().reset(ex);
  for (int s = 0; s < steps; ++s) {
    const batch b = make_batch(s);
    train.step(b.images, b.labels, ex);
  }
  finish(ex);
  if constexpr (requires { train.copy_parameters_to(net, ex); }) {  // data_parallel: under ZeRO-3, gathered
    network_t whole(global_batch, {.seed = seed + 1000});
    train.copy_parameters_to(whole, ex);
    r.parameters = parameters_of(whole);
  } else {
    r.parameters = parameters_of(net);
  }
  r.totals = totals();
  r.gradient_norm_squared = train.controller().scalars().read_gradient_norm_squared();
  train.loss().reset(ex);
  const batch b = make_batch(99, 50);
  train.evaluate(b.images, b.labels, ex);
  finish(ex);
  r.evaluated = totals();
}

// Data-parallel training for `steps` steps. Each rank's network starts from a
// different seed: initialize() must make them rank 0's.
template <template <class, class> class Optimizer, class Communicator, class OptimizerOptions>
run_result train_data_parallel(Communicator& c, const optim::trainer_options& t, const OptimizerOptions& o,
                               const parallel::data_parallel_options& p, int steps, executor ex = {}) {
  network_t net(global_batch, {.seed = seed + std::uint64_t(c.rank())});
  parallel::data_parallel<network_t, Optimizer, Communicator> train(net, c, t, o, p);
  run_result r;
  train_and_evaluate(train, net, steps, [&] { return train.totals(); }, r, ex);
  r.timeline = train.timeline();  // of the last step
  r.memory = train.memory();
  r.bytes_per_step = train.bytes_per_step();
  return r;
}

// The reference: optim::trainer on one rank over every global batch.
template <template <class, class> class Optimizer, class OptimizerOptions>
run_result train_one_rank(const optim::trainer_options& t, const OptimizerOptions& o, int steps, executor ex = {}) {
  network_t net(64, {.seed = seed});  // room for the evaluation batch of 50 in one piece
  optim::trainer<network_t, Optimizer> train(net, t, o);
  run_result r;
  train_and_evaluate(train, net, steps, [&] { return train.loss().totals(); }, r, ex);
  return r;
}

// max over elements of |got - want| / max(1, |want|).
inline double largest_difference(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = got.size() == want.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double d = std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(want[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

// Every rank's share of step 0's gradient, as data parallelism communicates it
// (the mean over the rank's rows, scaled by 1 / ranks), computed here on one network.
inline std::vector<std::vector<double>> gradients_of_each_rank(int ranks, executor ex = {}) {
  network_t net(global_batch, {.seed = seed});
  nn::softmax_cross_entropy<space> loss(global_batch, {.grad_scale = 1.0f / float(ranks)});
  const batch b = make_batch(0);
  const index_t rows = global_batch / ranks;
  std::vector<std::vector<double>> gradients;
  for (int r = 0; r < ranks; ++r) {
    const auto x = parallel::detail::batch_rows(b.images.view(), r * rows, rows);
    const auto y = parallel::detail::batch_rows(b.labels.view(), r * rows, rows);
    const auto logits = net.forward(x, ex);
    loss.forward_backward(logits, y, net.output_gradient(), ex);
    net.backward(ex);
    const auto g = to_host(net.group<float>().gradients());
    gradients.emplace_back(g.data(), g.data() + g.size());
  }
  return gradients;
}

}  // namespace dp_test
