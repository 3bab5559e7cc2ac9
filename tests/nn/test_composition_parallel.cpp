// Tensor parallelism through composites: a residual and branches holding
// column -> row split linear layers are split layers themselves
// (parallel::tensor_parallel connects them, network::initialize draws their
// slices); forward, backward and AdamW training with clipping by the global
// norm equal the unsplit network's. The host suite runs it over comm::single
// (one way); with FUSOR_COMPOSITION_MPI the same checks run under mpirun -np 2.
#include <algorithm>

#include <fusor/comm/single.hpp>
#include <fusor/nn/branches.hpp>
#include <fusor/nn/chain.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/recompute.hpp>
#include <fusor/nn/residual.hpp>

#include "parallel/tensor_parallel_checks.hpp"
#if defined(FUSOR_COMPOSITION_MPI)
#include "comm/mpi_world.hpp"
#endif

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_composition_parallel {

// Declared here, so these are not ambiguous with test_composition.cpp's
// composition_test (a using-directive leaves both at global scope).
using tensor_parallel_test::batch;
using tensor_parallel_test::parameter_record;
using tensor_parallel_test::parameters_of;

namespace {
using namespace tensor_parallel_test;

template <class Column, class Row>
using blocks = nn::sequential<
    nn::features<64>,
    nn::residual<nn::layernorm<64>, nn::linear<64, 128, nn::relu, Column>, nn::linear<128, 64, nn::identity, Row>>,
    nn::branches<nn::join_add, nn::chain<nn::linear<64, 128, nn::gelu_tanh, Column>, nn::linear<128, 32, nn::tanh_activation, Row>>,
                 nn::linear<64, 32>>,
    nn::recomputed<nn::residual<nn::linear<32, 64, nn::tanh_activation, Column>, nn::linear<64, 32, nn::identity, Row>>>,
    nn::linear<32, 32>>;

template <class Layer>
concept has_shard_ways = requires { Layer::shard_ways; };

// Every parameter (and gradient) of the split network, gathered, against the unsplit one's.
template <class Communicator, class Split, class Whole>
void expect_same(Communicator& c, const Split& split, const Whole& whole, double tol, bool gradients, const std::string& when,
                 bool elementwise = true) {
  const auto reference = parameters_of(whole);
  std::size_t compared = 0;
  split.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto grads) {
    const parameter_record& want = reference.at(slot.name);
    const auto got = gathered(c, values, slot.shape, want.shape);
    if (std::all_of(want.values.begin(), want.values.end(), [](double v) { return v == 0; }))
      CHECK_MESSAGE(got == want.values, when, " ", slot.name);  // a layernorm's bias, still zero
    else if (elementwise) expect_close(got, want.values, tol, when + " " + slot.name, c.rank());
    else expect_close_in_norm(got, want.values, tol, when + " " + slot.name, c.rank());
    if (gradients)
      expect_close(gathered(c, grads, slot.shape, want.shape), want.gradients, tol, when + " gradient of " + slot.name, c.rank());
    ++compared;
  });
  CHECK(compared == reference.size());
}

template <int Ways, class Communicator, class Executor>
void check_composites(Communicator& c, const Executor& ex) {
  INFO("rank ", c.rank(), " of ", c.size(), ", ", Ways, " ways");
  using split_t = nn::network<blocks<column<Ways>, row<Ways>>, fp32, host_space>;
  using whole_t = nn::network<blocks<unsplit, unsplit>, fp32, host_space>;
  static_assert(split_t::template layer_type<0>::shard_ways == Ways);
  static_assert(!has_shard_ways<typename whole_t::template layer_type<0>>);

  split_t split(batch, {.seed = 11});
  parallel::tensor_parallel tp(split, c);
  CHECK(tp.split_layers() == 3);  // the residual, the branches and the recomputed residual
  CHECK(split.template layer<0>().connected());
  CHECK(split.template layer<1>().shard_index() == c.rank());
  whole_t whole(batch, {.seed = 11});
  expect_same(c, split, whole, 0.0, false, "initial");

  const auto x = random_tensor<fp32, input_extents, host_space>(input_extents(batch), 21);
  tensor<fp32, input_extents> dx_split{input_extents(batch)}, dx_whole{input_extents(batch)};
  expect_close(host_values(split.forward(x, ex)), host_values(whole.forward(x, ex)), 2e-5, "output", c.rank());
  using output_extents = extents<index_t, dynamic, 32>;
  const auto dy = random_tensor<fp32, output_extents, host_space>(output_extents(batch), 22);
  copy(split.output_gradient(), dy);
  copy(whole.output_gradient(), dy);
  split.backward(ex, typename split_t::input_view(dx_split.data(), batch));
  whole.backward(ex, typename whole_t::input_view(dx_whole.data(), batch));
  expect_close(host_values(dx_split), host_values(dx_whole), 2e-5, "input gradient", c.rank());
  expect_same(c, split, whole, 2e-5, true, "after backward");

  // AdamW with clipping by the norm of every rank's gradients.
  const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(1e-2f),
                                              .clip = {.max_norm = 0.5f}};
  fusor::optim::trainer<split_t, fusor::optim::adamw> train_split(split, options, fusor::optim::adamw_options{});
  fusor::optim::trainer<whole_t, fusor::optim::adamw> train_whole(whole, options, fusor::optim::adamw_options{});
  train_split.reduce_gradient_norm_with(tp);
  train_split.initialize(ex);
  train_whole.initialize(ex);
  for (std::uint32_t s = 0; s < 3; ++s) {
    const auto xs = random_tensor<fp32, input_extents, host_space>(input_extents(batch), 100 + s);
    const auto labels = random_labels<host_space>(batch, 32, 200 + s);
    train_split.step(xs, labels, ex);
    train_whole.step(xs, labels, ex);
  }
  CHECK(train_split.loss().totals().mean_loss == doctest::Approx(train_whole.loss().totals().mean_loss).epsilon(1e-4));
  expect_same(c, split, whole, 1e-4, false, "after 3 steps:", false);
}
}  // namespace

#if defined(FUSOR_COMPOSITION_MPI)
TEST_CASE("composites holding split layers, over MPI") {
  auto& c = comm_test::world();
  fusor::parallel::dispatch_tensor_parallel<2, 4>(c.size(), {128}, [&]<int Ways>() {
    check_composites<Ways>(c, fusor::host_executor{});
  });
}
#else
TEST_CASE("[host] composites holding split layers, over comm::single (one way)") {
  fusor::comm::single c;
  check_composites<1>(c, fusor::host_executor{});
}

TEST_CASE("[host] a composite split for another number of ranks is refused, named") {
  fusor::comm::single c;
  nn::network<blocks<column<2>, row<2>>, fp32, host_space> net(batch, {.seed = 1});
  expect_error<fusor::error>([&] { parallel::tensor_parallel tp(net, c); },
                             {"mismatched communicator sizes", "layer 0", "nn::residual of 3 layers", "split 2 ways",
                              "has 1 ranks"});
  // Not connected: the split layers inside refuse to run.
  const auto x = random_tensor<fp32, input_extents, host_space>(input_extents(batch), 1);
  expect_error<fusor::error>([&] { net.forward(x, fusor::host_executor{}); }, {"nn::linear<64, 128> (column_parallel<2>)"});
}
#endif

}  // namespace test_composition_parallel
