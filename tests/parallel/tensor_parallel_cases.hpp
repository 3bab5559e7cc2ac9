// tests/parallel/tensor_parallel_cases.hpp — the test bodies of tensor
// parallelism, each templated on the degree, precision, memory space,
// communicator and executor (see tensor_parallel_checks.hpp for the helpers).
#pragma once

#include <string>

#include "parallel/tensor_parallel_checks.hpp"
#include "parallel/tensor_parallel_norm_cases.hpp"

namespace tensor_parallel_test {

// A split network holds exactly the slices of the unsplit network's initial
// parameters from the same seed (bit for bit), every rank its own.
template <int Ways, class Precision, class Space, class Communicator>
void check_initial_parameters(Communicator& c) {
  nn::network<mlp<column<Ways>, row<Ways>>, Precision, Space> split(batch, {.seed = 7});
  parallel::tensor_parallel tp(split, c);
  CHECK(tp.split_layers() == 4);
  CHECK(tp.size() == Ways);
  CHECK(tp.rank() == c.rank());
  CHECK(split.template layer<0>().shard_index() == c.rank());
  nn::network<mlp<unsplit, unsplit>, Precision, Space> whole(batch, {.seed = 7});
  expect_same_parameters(c, split, whole, 0.0, false, "initial");
}

// Forward and backward of the split network against the unsplit one: the
// output, the input's gradient and every parameter's gradient.
template <template <class, class> class Mlp, int Ways, class Precision, class Space, class Communicator, class Executor>
void check_forward_backward(Communicator& c, const Executor& ex, double tol) {
  using split_t = nn::network<Mlp<column<Ways>, row<Ways>>, Precision, Space>;
  using whole_t = nn::network<Mlp<unsplit, unsplit>, Precision, Space>;
  split_t split(batch, {.seed = 11});
  parallel::tensor_parallel tp(split, c);
  whole_t whole(batch, {.seed = 11});
  const auto x = random_tensor<Precision, input_extents, Space>(input_extents(batch), 21);
  tensor<Precision, input_extents, row_major, Space> dx_split{input_extents(batch)}, dx_whole{input_extents(batch)};
  poison(dx_split);
  poison(dx_whole);
  const auto y_split = split.forward(x, ex);
  const auto y_whole = whole.forward(x, ex);
  wait_for(ex);
  expect_close(host_values(y_split), host_values(y_whole), tol, "output", c.rank());

  using output_extents = extents<index_t, dynamic, 32>;
  const auto dy = random_tensor<Precision, output_extents, Space>(output_extents(batch), 22);
  copy(split.output_gradient(), dy);
  copy(whole.output_gradient(), dy);
  split.backward(ex, typename split_t::input_view(dx_split.data(), batch));
  whole.backward(ex, typename whole_t::input_view(dx_whole.data(), batch));
  wait_for(ex);
  expect_close(host_values(dx_split), host_values(dx_whole), tol, "input gradient", c.rank());
  expect_same_parameters(c, split, whole, tol, true, "after backward");
}

// One all-reduce per column -> row block in forward, one in backward, none in
// backward for the first block when the input's gradient is not wanted; and
// nothing else: a training step is three all-reduces for the two blocks.
template <int Ways, class Space, class Communicator, class Executor>
void check_communication_count(Communicator& c, const Executor& ex) {
  counting_communicator<Communicator> counting(c);
  using network_t = nn::network<mlp<column<Ways>, row<Ways>>, fp32, Space>;
  network_t net(batch, {.seed = 3});
  parallel::tensor_parallel tp(net, counting);
  const auto x = random_tensor<fp32, input_extents, Space>(input_extents(batch), 31);
  net.forward(x, ex);
  CHECK(counting.all_reduces == 2);
  net.backward(ex);
  CHECK(counting.all_reduces == 3);
  tensor<fp32, input_extents, row_major, Space> dx{input_extents(batch)};
  net.backward(ex, typename network_t::input_view(dx.data(), batch));
  CHECK(counting.all_reduces == 5);

  fusor::optim::trainer<network_t, fusor::optim::adamw> train(net, {}, fusor::optim::adamw_options{});
  train.initialize(ex);
  const auto labels = random_labels<Space>(batch, 32, 32);
  counting.all_reduces = 0;
  train.step(x, labels, ex);
  wait_for(ex);
  CHECK(counting.all_reduces == 3);
  CHECK(counting.other_calls == 0);
  // The global norm: one more all-reduce (8 bytes), none on one rank.
  train.reduce_gradient_norm_with(tp);
  counting.all_reduces = 0;
  train.step(x, labels, ex);
  wait_for(ex);
  CHECK(counting.all_reduces == (Ways > 1 ? 4 : 3));
  CHECK(counting.other_calls == 0);
}

// Optimizer steps through optim::trainer, every rank on the same batches: the
// split network's parameters (gathered) and losses follow the unsplit network's.
// SGD (linear in the gradients) is compared element by element; AdamW in norm.
template <int Ways, template <class, class> class Optimizer, class Precision, class Space, class Communicator,
          class Executor, class OptimizerOptions>
void check_training(Communicator& c, const Executor& ex, const OptimizerOptions& optimizer_options, float learning_rate,
                    double tol, bool elementwise, int steps) {
  using split_t = nn::network<mlp<column<Ways>, row<Ways>>, Precision, Space>;
  using whole_t = nn::network<mlp<unsplit, unsplit>, Precision, Space>;
  split_t split(batch, {.seed = 5});
  parallel::tensor_parallel tp(split, c);
  whole_t whole(batch, {.seed = 5});
  const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(learning_rate)};
  fusor::optim::trainer<split_t, Optimizer> train_split(split, options, optimizer_options);
  fusor::optim::trainer<whole_t, Optimizer> train_whole(whole, options, optimizer_options);
  train_split.initialize(ex);
  train_whole.initialize(ex);
  const auto before = parameters_of(whole).at("0.weight").values;
  for (int s = 0; s < steps; ++s) {
    const auto x = random_tensor<Precision, input_extents, Space>(input_extents(batch), 100 + std::uint32_t(s));
    const auto labels = random_labels<Space>(batch, 32, 200 + std::uint32_t(s));
    train_split.step(x, labels, ex);
    train_whole.step(x, labels, ex);
  }
  wait_for(ex);
  const auto split_totals = train_split.loss().totals(), whole_totals = train_whole.loss().totals();
  CHECK(split_totals.samples == whole_totals.samples);
  CHECK(split_totals.mean_loss == doctest::Approx(whole_totals.mean_loss).epsilon(tol));
  CHECK(split_totals.accuracy == doctest::Approx(whole_totals.accuracy).epsilon(tol));
  const auto after = parameters_of(whole).at("0.weight").values;
  double moved = 0;
  for (std::size_t i = 0; i < after.size(); ++i) moved = std::max(moved, std::fabs(after[i] - before[i]));
  CHECK_MESSAGE(moved > 1e-3, "training did not move the weights (largest change ", moved, ")");
  expect_same_parameters(c, split, whole, tol, false, "after " + std::to_string(steps) + " steps:", elementwise);
}

// A network split for another number of ranks is refused at start, naming the
// layer, its degree and the communicator's size; an unconnected split layer
// refuses to run, before and after a tensor_parallel's life.
template <int Ways, class Space, class Communicator, class Executor>
void check_errors(Communicator& c, const Executor& ex) {
  constexpr int wrong = 2 * Ways;
  nn::network<mlp<column<wrong>, row<wrong>>, fp32, Space> mismatched(batch, {.seed = 1});
  const std::string layer = "nn::linear<64, 128> (column_parallel<" + std::to_string(wrong) + ">)";
  const std::string ways = "split " + std::to_string(wrong) + " ways";
  const std::string ranks = "has " + std::to_string(Ways) + " ranks";
  expect_error<fusor::error>([&] { parallel::tensor_parallel tp(mismatched, c); },
                             {"mismatched communicator sizes", "layer 0", layer.c_str(), ways.c_str(), ranks.c_str()});

  nn::network<mlp<column<Ways>, row<Ways>>, fp32, Space> net(batch, {.seed = 1});
  const auto x = random_tensor<fp32, input_extents, Space>(input_extents(batch), 41);
  const std::string first = "nn::linear<64, 128> (column_parallel<" + std::to_string(Ways) + ">)";
  expect_error<fusor::error>([&] { net.forward(x, ex); }, {first.c_str(), "forward before", "tensor_parallel"});
  {
    parallel::tensor_parallel tp(net, c);
    net.forward(x, ex);
    wait_for(ex);
  }
  expect_error<fusor::error>([&] { net.forward(x, ex); }, {first.c_str(), "forward before"});
}

// Every case, at the communicator's size; bf16 with a tolerance for its 8-bit
// significand (partial sums are rounded before they are added).
template <int Ways, class Space, class Communicator, class Executor>
void check_everything(Communicator& c, const Executor& ex) {
  INFO("rank ", c.rank(), " of ", c.size(), ", ", Ways, " ways");
  SUBCASE("initial parameters are the unsplit network's slices") {
    check_initial_parameters<Ways, fp32, Space>(c);
    check_initial_parameters<Ways, bf16, Space>(c);
  }
  SUBCASE("forward and backward equal the unsplit network's (fp32)") {
    check_forward_backward<mlp, Ways, fp32, Space>(c, ex, 2e-5);
    check_forward_backward<mlp_other, Ways, fp32, Space>(c, ex, 2e-5);
  }
  SUBCASE("forward and backward in bf16") { check_forward_backward<mlp, Ways, bf16, Space>(c, ex, 0.1); }
  SUBCASE("one all-reduce per block forward and one backward") { check_communication_count<Ways, Space>(c, ex); }
  SUBCASE("SGD and AdamW training equal unsplit training") {
    const fusor::optim::sgd_options sgd{.momentum = 0.9f, .weight_decay = 0.01f};
    check_training<Ways, fusor::optim::sgd, fp32, Space>(c, ex, sgd, 0.05f, 2e-5, true, 4);
    const fusor::optim::adamw_options adamw{.weight_decay = 0.01f};
    check_training<Ways, fusor::optim::adamw, fp32, Space>(c, ex, adamw, 1e-2f, 1e-4, false, 4);
  }
  SUBCASE("clipping and the Inf/NaN skip by the global norm") { check_global_norm<Ways, Space>(c, ex); }
  SUBCASE("errors") { check_errors<Ways, Space>(c, ex); }
}

}  // namespace tensor_parallel_test
