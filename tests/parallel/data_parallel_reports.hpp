// tests/parallel/data_parallel_reports.hpp — data parallelism's reports and
// errors, as bodies of the communicator: the step timeline shows overlap (or its
// absence), buckets go in reverse layer order, memory and bytes per step match
// the arithmetic of the layers' sizes, bad configurations name their numbers.
#pragma once

#include <string>

#include "parallel/data_parallel_checks.hpp"

namespace dp_test {

inline index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

// Overlap shown: with a bucket per layer, the last layer's bucket is issued
// before backward ends and the buckets go out in reverse layer order, each
// after the layer it waits for; with overlap off none is issued before backward ends.
template <class Communicator>
void check_timeline(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size());
  const optim::adamw_options o{};
  for (bool overlap : {true, false}) {
    INFO("overlap ", overlap);
    const run_result r = train_data_parallel<optim::adamw>(c, trainer_options(), o, {.bucket_bytes = 1, .overlap = overlap}, 2);
    const auto& t = r.timeline;
    CHECK(t.buckets.size() == 3);
    if (t.buckets.size() != 3) continue;
    const std::size_t layers[3] = {3, 2, 0};  // reverse order, the relu (layer 1) has no bucket
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK(t.buckets[i].lowest_layer == layers[i]);
      CHECK(t.buckets[i].highest_layer == layers[i]);
      CHECK(t.buckets[i].bytes == layer_sizes[2 - i] * index_t(sizeof(float)));
      CHECK(t.buckets[i].issued >= t.backward_start);
      CHECK(t.buckets[i].completed >= t.buckets[i].issued);
      if (i > 0) CHECK(t.buckets[i].issued >= t.buckets[i - 1].issued);
    }
    CHECK(t.backward_end > t.backward_start);
    if (overlap) {
      CHECK(t.buckets[0].issued < t.backward_end);  // communication started while backward still ran
      CHECK(t.buckets[1].issued < t.backward_end);
    } else {
      for (const auto& b : t.buckets) CHECK(b.issued >= t.backward_end);
    }
    CHECK(t.step_end >= t.buckets[2].completed);
    CHECK(t.gather_start == -1);
  }
}

// Bucket plans of the network: a bucket per layer, two, one.
template <class Communicator>
void check_bucket_plans(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size());
  network_t net(global_batch, {.seed = seed});
  const auto plan = [&](parallel::data_parallel_options p) {
    parallel::data_parallel<network_t, optim::adamw, Communicator> train(net, c, trainer_options(), optim::adamw_options{}, p);
    return train.buckets();
  };
  const auto per_layer = plan({.bucket_bytes = 1});
  CHECK(per_layer.buckets.size() == 3);
  CHECK(per_layer.size == 1632);
  const auto two = plan({.bucket_bytes = 4000});  // 160 + 800 floats = 3840 bytes fit, then 672 floats
  CHECK(two.buckets.size() == 2);
  if (two.buckets.size() == 2) {
    CHECK(two.buckets[0].highest_layer == 3);
    CHECK(two.buckets[0].lowest_layer == 2);
    CHECK(two.buckets[0].size() == 960);
    CHECK(two.buckets[1].lowest_layer == 0);
    CHECK(two.buckets[1].begin == 0);
  }
  // bf16 communication counts 2 bytes an element: the three layers are 3264 bytes.
  CHECK(plan({.bucket_bytes = 3264, .communication = parallel::gradient_communication::bf16}).buckets.size() == 1);
  CHECK(plan({.bucket_bytes = 3263, .communication = parallel::gradient_communication::bf16}).buckets.size() == 2);
  CHECK(plan({}).buckets.size() == 1);
}

// Memory per rank and bytes per step against the layers' sizes: ZeRO-1 pads
// each bucket (here a layer) to a multiple of the ranks and keeps 1/ranks of
// AdamW's two fp32 moments, plus the reduced gradient shard; where padding was
// needed, a packed parameter shard, a padded gradient copy and a padded
// gathering buffer too (unpadded, the optimizer updates the parameters in
// place and all_gather runs in place).
template <class Communicator>
void check_memory(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size());
  const index_t n = c.size(), size = 1632, f = sizeof(float);
  index_t padded = 0;
  for (index_t s : layer_sizes) padded += round_up(s, n);
  const index_t shard = padded / n;
  const optim::adamw_options o{};
  const run_result plain = train_data_parallel<optim::adamw>(c, trainer_options(), o, {.bucket_bytes = 1}, 1);
  CHECK(plain.memory.parameters == size * f);
  CHECK(plain.memory.gradients == size * f);
  CHECK(plain.memory.optimizer_state == 2 * size * f);
  CHECK(plain.memory.communication == 0);  // the gradients are all-reduced in place
  CHECK(plain.bytes_per_step == size * f);

  const run_result zero = train_data_parallel<optim::adamw>(c, trainer_options(), o, {.bucket_bytes = 1, .shard_optimizer_state = true}, 1);
  CHECK(zero.memory.parameters == size * f);
  CHECK(zero.memory.optimizer_state == 2 * shard * f);
  const index_t padding_buffers = padded != size ? shard * f + 2 * padded * f : 0;
  CHECK(zero.memory.communication == shard * f + padding_buffers);
  CHECK(zero.bytes_per_step == padded * f + shard * f + index_t(sizeof(double)));
  // The optimizer state drops n-fold, up to the padding.
  CHECK(double(plain.memory.optimizer_state) / double(zero.memory.optimizer_state) >= double(n) * size / padded);

  // ZeRO-2: no gradient buffer of the network's size, two slabs and this
  // rank's shard of the sum instead.
  const run_result two = train_data_parallel<optim::adamw>(c, trainer_options(), o, {.bucket_bytes = 1, .shard_gradients = true}, 1);
  // Buckets in backward's order: layer 3, layer 2, layer 0; slab 0 takes the
  // even ones (the larger is layer 0's), slab 1 the odd one (layer 2's).
  const index_t slabs = round_up(672, n) + round_up(800, n);
  CHECK(two.memory.parameters == size * f);
  CHECK(two.memory.gradients == slabs * f + shard * f);
  CHECK(two.memory.optimizer_state == 2 * shard * f);
  CHECK(two.memory.communication == (padded != size ? shard * f + padded * f : 0));  // the parameter shard, staging
  CHECK(two.bytes_per_step == zero.bytes_per_step);  // the same collectives as ZeRO-1

  // ZeRO-3: the parameters too: this rank's shard and two value slabs like the
  // gradient slabs; every bucket's shard gathered in forward, all but the
  // first two (layers 3 and 2) again in backward.
  const run_result three = train_data_parallel<optim::adamw>(c, trainer_options(), o, {.bucket_bytes = 1, .shard_parameters = true}, 1);
  CHECK(three.memory.parameters == slabs * f + shard * f);
  CHECK(three.memory.gradients == slabs * f + shard * f);
  CHECK(three.memory.optimizer_state == 2 * shard * f);
  CHECK(three.memory.communication == 0);
  CHECK(three.bytes_per_step == padded * f + (shard + round_up(672, n) / n) * f + index_t(sizeof(double)));

  const run_result narrow = train_data_parallel<optim::adamw>(
      c, trainer_options(), o, {.micro_batches = 2, .communication = parallel::gradient_communication::bf16}, 1);
  CHECK(narrow.memory.gradients == 2 * size * f);      // the network's, and the fp32 sum of micro-batches
  CHECK(narrow.memory.communication == size * 2);      // the bf16 copy
  CHECK(narrow.bytes_per_step == size * 2);            // half of fp32's
}

// ZeRO's memory against the ZeRO paper's formulas for model states per rank
// (Rajbhandari et al. 2020, section 5): Psi parameters, N ranks, ZeRO-2 holds
// the parameters whole and 1/N of the gradients and the optimizer state:
//   fp32 with AdamW (two fp32 moments):         4 Psi + (4 + 8) Psi / N bytes;
//   bf16 with AdamW (fp32 moments and master):  2 Psi + (2 + 12) Psi / N bytes.
//   ZeRO-3 holds 1/N of everything:                (4 + 4 + 8) Psi / N, or (2 + 2 + 12) Psi / N.
// fusor adds two slabs per sharded kind (a bucket per layer here, 1/48 of the
// network): 2 for ZeRO-2, 4 for ZeRO-3. The paper counts such buffers apart
// from the model states (section 6, "temporary buffers": constant in N), so
// the model states are checked against the formula within 10 % at every rank
// count, and the slabs against their own size; the total is their sum. The
// report is what fusor allocated, element for element.
namespace deep_model {
inline constexpr index_t width = 32, depth = 48;  // a layer: 32 x 32 + 32 = 1056 elements, a multiple of 2, 3, 4 and 8
template <std::size_t... I>
auto layers(std::index_sequence<I...>)
    -> nn::sequential<nn::features<width>, std::conditional_t<(I < depth), nn::linear<width, width, nn::relu>, void>...>;
using mlp = decltype(layers(std::make_index_sequence<depth>{}));
}  // namespace deep_model

template <class Precision, class Communicator>
void check_memory_against_zero_paper(Communicator& c) {
  using net_t = nn::network<deep_model::mlp, Precision, space>;
  using trainer_t = parallel::data_parallel<net_t, optim::adamw, Communicator>;
  const index_t n = c.size(), layer = deep_model::width * (deep_model::width + 1), psi = deep_model::depth * layer;
  const index_t e = sizeof(storage_t<Precision>);
  const bool fp32 = e == 4;
  INFO(std::string(fp32 ? "fp32" : "bf16"), ", rank ", c.rank(), " of ", c.size());
  net_t net(8, {.seed = seed});
  trainer_t train(net, c, trainer_options(), optim::adamw_options{}, {.bucket_bytes = 1, .shard_gradients = true});
  const parallel::memory_report m = train.memory();
  CHECK(m.parameters == psi * e);
  CHECK(m.gradients == (psi / n + 2 * layer) * e);  // this rank's shard of the sum, two slabs
  CHECK(m.optimizer_state == (fp32 ? 8 : 12) * psi / n);
  CHECK(m.communication == 0);  // no padding: updated and gathered in place
  CHECK(m.slabs == 2 * layer * e);
  const double formula = fp32 ? 4.0 * psi + 12.0 * psi / n : 2.0 * psi + 14.0 * psi / n;
  CHECK(double(m.model_states()) >= formula);
  CHECK(double(m.model_states()) <= 1.10 * formula);
  CHECK(m.total() == m.model_states() + m.slabs);

  net_t whole(8, {.seed = seed});
  trainer_t three(whole, c, trainer_options(), optim::adamw_options{}, {.bucket_bytes = 1, .shard_parameters = true});
  const parallel::memory_report m3 = three.memory();
  CHECK(m3.parameters == (psi / n + 2 * layer) * e);
  CHECK(m3.gradients == (psi / n + 2 * layer) * e);
  CHECK(m3.optimizer_state == (fp32 ? 8 : 12) * psi / n);
  CHECK(m3.communication == 0);
  CHECK(m3.slabs == 4 * layer * e);
  const double formula3 = 16.0 * psi / n;  // fp32 and bf16 alike: (4 + 4 + 8) or (2 + 2 + 12) bytes a parameter
  CHECK(double(m3.model_states()) >= formula3);
  CHECK(double(m3.model_states()) <= 1.10 * formula3);
  CHECK(m3.total() == m3.model_states() + m3.slabs);
}

// ZeRO-3's evaluation when ranks need different numbers of forwards (a batch
// of 50 split over the ranks, 4 rows a forward: at 3 ranks 16 and 17 rows, 4
// and 5 forwards): every rank takes part in every gather, and the totals are
// those of the same network without ZeRO.
template <class Communicator>
void check_zero3_uneven_evaluation(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size());
  executor ex{};
  const batch b = make_batch(7, 50);
  const auto evaluated = [&](bool zero3) {
    network_t net(4, {.seed = seed});
    parallel::data_parallel<network_t, optim::sgd, Communicator> train(net, c, trainer_options(), optim::sgd_options{},
                                                                       {.shard_parameters = zero3});
    train.initialize(ex);
    train.loss().reset(ex);
    train.evaluate(b.images, b.labels, ex);
    finish(ex);
    return train.totals();
  };
  const nn::loss_totals plain = evaluated(false), sharded = evaluated(true);
  CHECK(sharded.samples == 50);
  CHECK(plain.samples == 50);
  CHECK(close(sharded.mean_loss, plain.mean_loss, 1e-12));
  CHECK(close(sharded.accuracy, plain.accuracy, 1e-12));
}

// What a trainer exposes, used as a user would; and once the first step has
// run, a step allocates nothing from fusor (buffers, plans and request lists are
// made at construction): plain, micro-batches with bf16, ZeRO-1 (padded at 3 ranks).
template <class Communicator>
void check_accessors_and_allocation(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size());
  executor ex{};
  for (parallel::data_parallel_options p :
       {parallel::data_parallel_options{.bucket_bytes = 1},
        parallel::data_parallel_options{.micro_batches = 2, .communication = parallel::gradient_communication::bf16},
        parallel::data_parallel_options{.bucket_bytes = 1, .shard_optimizer_state = true},
        parallel::data_parallel_options{.bucket_bytes = 1, .micro_batches = 2, .shard_gradients = true},
        parallel::data_parallel_options{.bucket_bytes = 1, .shard_parameters = true}}) {
    network_t net(global_batch, {.seed = seed});
    parallel::data_parallel<network_t, optim::adamw, Communicator> train(net, c, trainer_options(), optim::adamw_options{}, p);
    CHECK(&train.network() == &net);
    CHECK(&train.communicator() == &c);
    CHECK(train.options().micro_batches == p.micro_batches);
    CHECK(train.options().shard_optimizer_state == p.shard_optimizer_state);
    train.initialize(ex);
    const batch first = make_batch(0), second = make_batch(1);
    train.step(first.images, first.labels, ex);
    const std::uint64_t before = fusor::allocation_count();
    train.step(second.images, second.labels, ex);
    finish(ex);
    CHECK(fusor::allocation_count() == before);
    CHECK(train.steps_taken() == 2);
    CHECK(train.controller().step_for_host() == 2);
  }
}

// Bad configurations are errors naming their numbers, at construction or the first step.
template <class Communicator>
void check_errors(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size());
  const int n = c.size();
  network_t net(8, {.seed = seed});
  using trainer_t = parallel::data_parallel<network_t, optim::sgd, Communicator>;
  expect_error<fusor::error>([&] { trainer_t(net, c, trainer_options(), optim::sgd_options{}, {.bucket_bytes = 0}); },
                             {"bucket_bytes", "at least 1", "not 0"});
  expect_error<fusor::error>([&] { trainer_t(net, c, trainer_options(), optim::sgd_options{}, {.micro_batches = 0}); },
                             {"micro_batches", "not 0"});
  expect_error<fusor::error>(
      [&] {
        trainer_t(net, c, trainer_options(), optim::sgd_options{},
                  {.communication = parallel::gradient_communication::powersgd, .shard_gradients = true});
      },
      {"PowerSGD", "ZeRO-2 (shard_gradients)", "choose one"});
  {  // ZeRO-2 takes the gradient buffer away: reading it whole is an error that says why
    network_t lent(8, {.seed = seed});
    trainer_t sharded(lent, c, trainer_options(), optim::sgd_options{}, {.shard_gradients = true});
    expect_error<fusor::error>([&] { (void)lent.group<float>().gradients(); }, {"not held in one buffer", "ZeRO-2"});
  }
  {  // ZeRO-3 takes the parameter buffer away once initialized
    network_t gathered(8, {.seed = seed});
    trainer_t sharded(gathered, c, trainer_options(), optim::sgd_options{}, {.shard_parameters = true});
    CHECK(sharded.options().shard_gradients);  // ZeRO-3 includes ZeRO-2
    sharded.initialize(executor{});
    expect_error<fusor::error>([&] { (void)gathered.group<float>().values(); }, {"not held in one buffer", "ZeRO-3"});
    expect_error<fusor::error>([&] { sharded.copy_parameters_to(gathered, executor{}); }, {"a network of its own"});
    expect_error<fusor::error>([&] { gathered.for_each_parameter([](const auto&, const auto&, const auto&) {}); },
                               {"ZeRO-3", "copy_parameters_to"});
  }
  trainer_t train(net, c, trainer_options(), optim::sgd_options{}, {.micro_batches = 2});
  executor ex{};
  train.initialize(ex);
  const index_t odd = 2 * index_t(n) * 2 + 1;  // e.g. 17 on 4 ranks x 2 micro-batches
  const batch uneven = make_batch(0, odd);
  const std::string odd_text = std::to_string(odd), ranks_text = std::to_string(n) + " ranks";
  expect_error<fusor::error>([&] { train.step(uneven.images, uneven.labels, ex); },
                             {"global batch of", odd_text.c_str(), ranks_text.c_str(), "2 micro-batches",
                              std::to_string(2 * n).c_str()});
  const index_t large = 2 * index_t(n) * 9;  // 9 samples a micro-batch for a network built for 8
  const batch too_large = make_batch(0, large);
  expect_error<fusor::error>([&] { train.step(too_large.images, too_large.labels, ex); },
                             {"micro-batch is 9 samples", std::to_string(large).c_str(), "max_batch of 8"});
  const batch fine = make_batch(0, 2 * n);
  const label_tensor wrong{dextents<index_t, 1>(2 * n + 1)};
  expect_error<fusor::shape_error>([&] { train.step(fine.images, wrong, ex); }, {"images but", "labels"});
  if (n > 1) {  // rank 0 passes twice the others' global batch: every rank refuses the step, naming both sizes
    const batch unequal = make_batch(0, c.rank() == 0 ? 4 * n : 2 * n);
    const std::string sizes = std::to_string(2 * n) + " to " + std::to_string(4 * n) + " samples";
    expect_error<fusor::error>([&] { train.step(unequal.images, unequal.labels, ex); },
                               {"the ranks pass global batches of", sizes.c_str(), "the same global batch"});
  }
}

}  // namespace dp_test
