// tests/parallel/pipeline_checks.hpp — the pipeline's checks, written once for
// any communicator, memory space and executor: the MPI binary runs them at 2
// and 4 ranks, the host suite with comm::single (one stage), the CUDA one over
// comm::nccl. Every rank also trains the whole network with optim::trainer on
// the same global batch from the same seed: after several steps each stage's
// parameters must be the whole network's of the same names, and the loss
// totals the same. Checks use CHECK, never REQUIRE: a rank that stops early
// would leave the others waiting for its messages.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fusor/nn/dropout.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/parallel/pipeline.hpp>

#include "support/fusor_test.hpp"

namespace pipeline_test {

using namespace fusor_test;
namespace nn = fusor::nn;
namespace optim = fusor::optim;
namespace parallel = fusor::parallel;

// Six layers, so four ranks get at least one each and a map can be uneven.
using mlp = nn::sequential<nn::features<12>, nn::linear<12, 16, nn::relu>, nn::linear<16, 16, nn::gelu_tanh>,
                           nn::linear<16, 12, nn::relu>, nn::linear<12, 8, nn::relu>, nn::linear<8, 8, nn::relu>,
                           nn::linear<8, 5>>;
inline constexpr std::size_t depth = 6;
// Six layers too, two of them dropout (30%): each micro-batch must draw the masks
// of its rows' place in the global batch, as one process does.
using dropout_mlp = nn::sequential<nn::features<12>, nn::linear<12, 16, nn::relu>, nn::dropout<30>,
                                   nn::linear<16, 16, nn::gelu_tanh>, nn::dropout<30>, nn::linear<16, 12, nn::relu>,
                                   nn::linear<12, 5>>;
inline constexpr index_t global_batch = 12;
inline constexpr std::uint64_t seed = 5;

// Where the tested executor runs (device memory is allocated there too).
inline fusor::stream_t stream_of([[maybe_unused]] const executor& ex) {
#if defined(FUSOR_TEST_CUDA)
  return ex.stream;
#else
  return {};
#endif
}

template <class Communicator, class Precision = fp32>
using mlp_pipeline = parallel::pipeline<mlp, Precision, space, optim::adamw, Communicator>;

// Stage 0 gets every layer but one per other stage: as uneven as it gets.
inline std::vector<std::size_t> uneven_stage_starts(int stages) {
  std::vector<std::size_t> starts{0};
  for (int s = 1; s < stages; ++s) starts.push_back(depth - std::size_t(stages - s));
  return starts;
}

struct training_case {
  parallel::pipeline_schedule schedule = parallel::pipeline_schedule::one_forward_one_backward;
  index_t micro_batches = 4;
  std::vector<std::size_t> stage_starts = {};
  float max_norm = 0.0f;  // > 0: clipping, and it must take effect
  int steps = 4;
  bool dynamic_loss_scale = false;  // fp16: the scale must grow the same on every stage
};

inline std::string describe(const training_case& c, int rank, int ranks) {
  return std::string(parallel::name(c.schedule)) + ", " + std::to_string(c.micro_batches) + " micro-batches, map " +
         parallel::stage_map_string(c.stage_starts) + ", max_norm " + std::to_string(c.max_norm) + ", rank " +
         std::to_string(rank) + " of " + std::to_string(ranks);
}

struct batch_data {
  host_tensor<float, dextents<index_t, 2>> images{dextents<index_t, 2>(global_batch, 12)};
  host_tensor<std::int32_t, dextents<index_t, 1>> labels{dextents<index_t, 1>(global_batch)};
};
inline batch_data random_batch(std::uint32_t batch_seed) {
  batch_data b;
  fill_random(b.images, batch_seed);
  std::mt19937 rng(batch_seed + 1000);
  for (index_t i = 0; i < global_batch; ++i) b.labels.data()[i] = std::int32_t(rng() % 5);
  return b;
}

// Each of the stage's parameters against the whole network's of the same name.
template <class Pipeline, class Whole>
void check_same_parameters(const Pipeline& pipe, const Whole& whole, double tolerance) {
  index_t compared = 0;
  pipe.for_each_parameter([&](const nn::parameter_slot& slot, const auto& values, const auto&) {
    bool found = false;
    whole.for_each_parameter([&](const nn::parameter_slot& w, const auto& wv, const auto&) {
      if (w.name != slot.name) return;
      found = true;
      const std::vector<double> got = as_doubles(values), want = as_doubles(wv);
      CHECK(got.size() == want.size());
      index_t bad = 0;
      double worst = 0;
      for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
        bad += !close(got[i], want[i], tolerance);
        worst = std::max(worst, std::fabs(got[i] - want[i]));
      }
      CHECK_MESSAGE(bad == 0, slot.name, ": ", bad, " of ", got.size(), " values differ, worst by ", worst);
      ++compared;
    });
    CHECK_MESSAGE(found, slot.name, " is not a parameter of the whole network");
  });
  // Every parameter of the whole network's layers in this stage's range was compared.
  const nn::layer_range layers = pipe.layers();
  index_t expected = 0;
  whole.for_each_parameter([&](const nn::parameter_slot& w, const auto&, const auto&) {
    const std::size_t layer = std::stoul(w.name.substr(0, w.name.find('.')));
    expected += layer >= layers.first && layer < layers.last;
  });
  CHECK(compared == expected);
}

// Trains the pipeline and, alone on this rank, the whole network on the same
// batches; the parameters, the gradient multiplier (clipping) and the loss
// totals must agree, and so must evaluation.
template <class Precision = fp32, class Sequential = mlp, class Communicator>
void check_equals_sequential(Communicator& comm, const executor& ex, const training_case& c) {
  INFO(describe(c, comm.rank(), comm.size()), ", ", sizeof(storage_t<Precision>) * 8, "-bit parameters");
  constexpr bool full_precision = std::is_same_v<Precision, fp32>;
  // fp32: rounding apart (measured: 6e-8 at most); 16-bit: one rounding of the stored value.
  const double tolerance = full_precision ? 1e-6 : 2 * fusor_test::tolerance<Precision>();
  const optim::trainer_options trainer_options{
      .schedule = optim::learning_rate_schedule::constant(1e-2f),
      .clip = {c.max_norm},
      .scaling = {.dynamic = c.dynamic_loss_scale, .initial_scale = 1024.0f, .growth_interval = 2},
      .stream = stream_of(ex)};
  const optim::adamw_options adamw{.weight_decay = 1e-2f};
  nn::network<Sequential, Precision, space> whole(global_batch, {.seed = seed, .stream = stream_of(ex)});
  optim::trainer<decltype(whole), optim::adamw> reference(whole, trainer_options, adamw);
  reference.initialize(ex);
  parallel::pipeline<Sequential, Precision, space, optim::adamw, Communicator> pipe(
      comm, global_batch, {.seed = seed, .stream = stream_of(ex)}, trainer_options, adamw,
      {.micro_batches = c.micro_batches, .schedule = c.schedule, .stage_starts = c.stage_starts});
  pipe.initialize(ex);
  const bool first = pipe.stage() == 0, last = pipe.stage() + 1 == pipe.stages();
  CHECK(pipe.micro_batch_size() == global_batch / c.micro_batches);
  CHECK(pipe.network().layers().first == pipe.layers().first);
  CHECK(pipe.network().layers().last == pipe.layers().last);
  CHECK(pipe.network().parameter_count() <= whole.parameter_count());

  for (int step = 0; step < c.steps; ++step) {
    const batch_data b = random_batch(100 + std::uint32_t(step));
    const auto images = to_space(b.images);
    const auto labels = to_space(b.labels);
    reference.step(images, labels, ex);
    // Each stage passes only what it reads; the others' views are empty.
    pipe.step(first ? images.view() : decltype(images.view()){}, last ? labels.view() : decltype(labels.view()){}, ex);
  }
  finish(ex);
  check_same_parameters(pipe, whole, tolerance);
  CHECK(pipe.steps_taken() == std::uint64_t(c.steps));
  const optim::step_values got = pipe.controller().scalars().read(), want_values = reference.controller().scalars().read();
  if (c.max_norm > 0) CHECK_MESSAGE(want_values.gradient_multiplier < 0.99, "clipping did not take effect");
  if (c.dynamic_loss_scale) CHECK(want_values.loss_scale > 1024.0f);  // it grew
  CHECK(close(got.gradient_multiplier, want_values.gradient_multiplier, full_precision ? 1e-5 : tolerance));
  CHECK(got.loss_scale == want_values.loss_scale);
  CHECK(got.step == want_values.step);

  const nn::loss_totals trained = pipe.totals(), want = reference.loss().totals();
  CHECK(trained.samples == want.samples);
  CHECK(close(trained.mean_loss, want.mean_loss, full_precision ? 1e-5 : tolerance));
  if (full_precision) CHECK(close(trained.accuracy, want.accuracy, 1e-12));

  // Evaluation of a batch that is not a multiple of the micro-batch (every rank
  // passes the real views, so every rank knows its size).
  const batch_data b = random_batch(999);
  constexpr index_t part = global_batch - 1;
  const auto images = to_space(b.images);
  const auto labels = to_space(b.labels);
  const view<float, dextents<index_t, 2>, row_major, space> part_images(images.data(), part, 12);
  const view<std::int32_t, dextents<index_t, 1>, row_major, space> part_labels(labels.data(), part);
  pipe.reset_totals(ex);
  reference.loss().reset(ex);
  pipe.evaluate(part_images, part_labels, ex);
  reference.evaluate(part_images, part_labels, ex);
  finish(ex);
  const nn::loss_totals evaluated = pipe.totals(), evaluated_want = reference.loss().totals();
  CHECK(evaluated.samples == part);
  CHECK(evaluated_want.samples == part);
  CHECK(close(evaluated.mean_loss, evaluated_want.mean_loss, full_precision ? 1e-5 : tolerance));
  if (full_precision) CHECK(close(evaluated.accuracy, evaluated_want.accuracy, 1e-12));
}

// Both schedules, micro-batch counts below, at and above the stage count, the
// balanced and an uneven stage map, clipping; bf16 parameters, and fp16 with a
// dynamic loss scale.
template <class Communicator>
void check_training_cases(Communicator& comm, const executor& ex) {
  using parallel::pipeline_schedule;
  for (pipeline_schedule schedule : {pipeline_schedule::gpipe, pipeline_schedule::one_forward_one_backward}) {
    for (index_t m : {index_t{1}, index_t{2}, index_t{4}, index_t{6}}) check_equals_sequential(comm, ex, {schedule, m});
    check_equals_sequential(comm, ex, {schedule, 3, uneven_stage_starts(comm.size())});
    check_equals_sequential(comm, ex, {schedule, 4, {}, 0.05f});
  }
  check_equals_sequential<bf16>(comm, ex, {pipeline_schedule::one_forward_one_backward, 4});
  check_equals_sequential<fp16>(comm, ex, {.micro_batches = 3, .steps = 6, .dynamic_loss_scale = true});
  for (pipeline_schedule schedule : {pipeline_schedule::gpipe, pipeline_schedule::one_forward_one_backward})
    check_equals_sequential<fp32, dropout_mlp>(comm, ex, {schedule, 4, uneven_stage_starts(comm.size())});
}

// report(): the bubble formulas, this stage's layers and contexts, and a
// measured idle fraction in [0, 1] after a step.
template <class Communicator>
void check_report(Communicator& comm, const executor& ex) {
  using parallel::pipeline_schedule;
  for (pipeline_schedule schedule : {pipeline_schedule::gpipe, pipeline_schedule::one_forward_one_backward}) {
    const int p = comm.size();
    const index_t m = 6;
    mlp_pipeline<Communicator> pipe(comm, global_batch, {.seed = seed, .stream = stream_of(ex)},
                                    {.stream = stream_of(ex)}, optim::adamw_options{},
                                    {.micro_batches = m, .schedule = schedule});
    const batch_data b = random_batch(7);
    const auto images = to_space(b.images);
    const auto labels = to_space(b.labels);
    CHECK(pipe.report().step_seconds == 0);  // no step yet
    pipe.step(images, labels, ex);
    finish(ex);
    const parallel::pipeline_report r = pipe.report();
    INFO(parallel::name(schedule), ", rank ", comm.rank(), " of ", p);
    CHECK(r.stage == comm.rank());
    CHECK(r.stages == p);
    CHECK(r.micro_batches == m);
    CHECK(r.schedule == schedule);
    CHECK(r.bubble_fraction == doctest::Approx(double(p - 1) / double(m)));
    CHECK(r.bubble_share_of_step == doctest::Approx(double(p - 1) / double(m + p - 1)));
    CHECK(r.contexts == parallel::pipeline_contexts(schedule, comm.rank(), p, m));
    CHECK(r.contexts == (schedule == pipeline_schedule::gpipe ? m : std::min<index_t>(m, p - comm.rank())));
    const nn::layer_range want = parallel::stage_layers(parallel::balanced_stage_starts(depth, p), comm.rank(), depth);
    CHECK(r.layers.first == want.first);
    CHECK(r.layers.last == want.last);
    CHECK(r.step_seconds > 0);
    CHECK(r.idle_fraction >= 0);
    CHECK(r.idle_fraction <= 1);
  }
}

// Start-up errors every rank sees alike (so no rank waits for another).
template <class Communicator>
void check_startup_errors(Communicator& comm, const executor& ex) {
  const int p = comm.size();
  auto make = [&](index_t batch, parallel::pipeline_options o) {
    mlp_pipeline<Communicator> pipe(comm, batch, {.seed = seed, .stream = stream_of(ex)}, {.stream = stream_of(ex)},
                                    optim::adamw_options{}, std::move(o));
  };
  expect_error<fusor::error>([&] { make(10, {.micro_batches = 4}); }, {"global batch of 10", "4 micro-batches"});
  expect_error<fusor::error>([&] { make(12, {.micro_batches = 0}); }, {"0 micro-batches"});
  std::vector<std::size_t> shifted = parallel::balanced_stage_starts(depth, p);
  shifted[0] = 1;
  expect_error<fusor::error>([&] { make(12, {.stage_starts = shifted}); }, {"start at layer 0, not 1"});
  std::vector<std::size_t> one_more = parallel::balanced_stage_starts(depth, p);
  one_more.push_back(depth - 1);
  expect_error<fusor::error>([&] { make(12, {.stage_starts = one_more}); },
                             {(std::to_string(p + 1) + " starts for " + std::to_string(p) + " ranks").c_str()});
  if (p >= 2) {
    std::vector<std::size_t> repeated = parallel::balanced_stage_starts(depth, p);
    repeated[1] = 0;
    expect_error<fusor::error>([&] { make(12, {.stage_starts = repeated}); }, {"must increase", "stage 1 starts at layer 0"});
    std::vector<std::size_t> past = parallel::balanced_stage_starts(depth, p);
    past.back() = depth;
    expect_error<fusor::error>([&] { make(12, {.stage_starts = past}); }, {"starts at layer 6", "has 6 layers"});
    // A network of fewer layers than ranks.
    using short_mlp = nn::sequential<nn::features<12>, nn::linear<12, 5>>;
    expect_error<fusor::error>(
        [&] {
          parallel::pipeline<short_mlp, fp32, space, optim::adamw, Communicator> pipe(
              comm, 12, {.seed = seed}, {.stream = stream_of(ex)}, optim::adamw_options{});
        },
        {(std::to_string(p) + " stages (ranks) for a network of 1 layer:").c_str()});
    // Stages built alike but for the batch (the last stage 24, the others 12), then for the micro-batches: every
    // stage refuses at construction, naming both numbers, instead of a truncated message in the first step.
    const bool last = comm.rank() + 1 == p;
    expect_error<fusor::error>([&] { make(last ? 24 : 12, {.micro_batches = 2}); },
                               {"built with global batches from 12 to 24", "every stage must be built alike"});
    expect_error<fusor::error>([&] { make(12, {.micro_batches = last ? 4 : 2}); },
                               {"micro-batch counts from 2 to 4"});
    // The last stage given another map (its own first layer moved by one): refused, not a network missing a layer.
    const std::vector<std::size_t> balanced = parallel::balanced_stage_starts(depth, p);
    std::vector<std::size_t> moved = balanced;
    const bool later = moved.back() + 1 < depth;
    moved.back() = later ? moved.back() + 1 : moved.back() - 1;
    REQUIRE(moved.back() > moved[moved.size() - 2]);
    const std::string lower = std::to_string(std::min(balanced.back(), moved.back()));
    const std::string higher = std::to_string(std::max(balanced.back(), moved.back()));
    expect_error<fusor::error>([&] { make(12, {.stage_starts = last ? moved : balanced}); },
                               {("different stage_starts: stage " + std::to_string(p - 1) + " starts at layer " +
                                 lower + " on some and " + higher + " on others").c_str()});
  }
}

}  // namespace pipeline_test
