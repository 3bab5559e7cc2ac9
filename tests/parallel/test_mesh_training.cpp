// Data x tensor parallelism over a mesh (parallel/mesh.hpp) under mpirun: the
// network split over the mesh's tensor group (parallel::tensor_parallel),
// trained data-parallel over its data group (parallel::data_parallel, the
// tensor group making the clipped norm global), against optim::trainer on one
// process with the whole network and the whole batch: the losses of 5 AdamW
// steps agree within 1e-5 relative (fp32) at every data x tensor split of the
// world (4 ranks: 4x1, 2x2, 1x4; 8 ranks: 8x1, 4x2, 2x4, 1x8). Data x pipeline
// likewise: a pipeline (1F1B, 2 micro-batches) over the mesh's pipeline group per
// replica, the gradients averaged over its data group, against one process, at
// every data x pipeline split (8 ranks: 8x1, 4x2, 2x4, 1x8, on an 8-layer MLP).
// And all three: pipelines whose stages are split over the tensor group, at
// every data x tensor x pipeline split with more than one tensor and pipeline
// rank (8 ranks: 2x2x2, 1x2x4, 1x4x2; 4 ranks: 1x2x2).
// Data x tensor with ZeRO-1 likewise (4 ranks: 2x2, 1x4; 8 ranks: 4x2, 2x4).
// The clip is low enough to act at every step, so a norm that is not global shows.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fusor/optim/adamw.hpp>
#include <fusor/parallel/data_parallel.hpp>
#include <fusor/parallel/mesh.hpp>
#include <fusor/parallel/pipeline.hpp>
#include <fusor/parallel/tensor_parallel.hpp>

#include "comm/mpi_world.hpp"
#include "parallel/tensor_parallel_checks.hpp"

using namespace tensor_parallel_test;

namespace {
constexpr index_t global_batch = 24;
constexpr int steps = 5;
const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(1e-2f),
                                            .clip = {.max_norm = 0.05f}};

// Each step's loss within 1e-5 relative of the single process's.
void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t s = 0; s < want.size(); ++s) {
    INFO("step ", s + 1, ": ", got[s], " against ", want[s]);
    CHECK(std::fabs(got[s] - want[s]) <= 1e-5 * std::fabs(want[s]));
  }
}

// The losses of `steps` steps on one process: the whole network, the whole batch.
std::vector<double> single_process_losses() {
  using whole_t = nn::network<mlp<unsplit, unsplit>, fp32, host_space>;
  whole_t whole(global_batch, {.seed = 5});
  fusor::optim::trainer<whole_t, fusor::optim::adamw> train(whole, options, fusor::optim::adamw_options{});
  train.initialize(host_executor{});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto x = random_tensor<fp32, input_extents, host_space>(input_extents(global_batch), 100);
    const auto labels = random_labels<host_space>(global_batch, 32, 200);
    train.loss().reset(host_executor{});
    train.step(x, labels, host_executor{});
    losses.push_back(train.loss().totals().mean_loss);
  }
  return losses;
}

// The same on a data x tensor mesh with `Ways` tensor ranks (ZeRO-1, 2 or 3
// over the data group when `zero_stage` says so, in 4000-byte buckets:
// shards cut across tensors).
template <int Ways>
std::vector<double> mesh_losses(fusor::comm::mpi& world, int zero_stage = 0) {
  parallel::mesh grid(world, {.data = world.size() / Ways, .tensor = Ways, .pipeline = 1});
  using split_t = nn::network<std::conditional_t<Ways == 1, mlp<unsplit, unsplit>, mlp<column<Ways>, row<Ways>>>, fp32,
                              host_space>;
  split_t net(global_batch / grid.shape().data, {.seed = 5});
  std::vector<double> losses;
  const auto train = [&](auto* tp) {
    parallel::data_parallel<split_t, fusor::optim::adamw, fusor::comm::mpi> dp(
        net, grid.data(), options, fusor::optim::adamw_options{},
        {.bucket_bytes = zero_stage > 0 ? 4000 : index_t{1} << 20,
         .shard_optimizer_state = zero_stage == 1,
         .shard_gradients = zero_stage == 2,
         .shard_parameters = zero_stage == 3});
    if (tp != nullptr) dp.reduce_gradient_norm_with(*tp);
    dp.initialize(host_executor{});
    for (int s = 0; s < steps; ++s) {
      const auto x = random_tensor<fp32, input_extents, host_space>(input_extents(global_batch), 100);
      const auto labels = random_labels<host_space>(global_batch, 32, 200);
      dp.loss().reset(host_executor{});
      dp.step(x, labels, host_executor{});
      losses.push_back(dp.totals().mean_loss);
    }
  };
  if constexpr (Ways == 1) {
    train(static_cast<parallel::tensor_parallel<split_t, fusor::comm::mpi>*>(nullptr));
  } else {
    parallel::tensor_parallel tp(net, grid.tensor());
    train(&tp);
  }
  return losses;
}
}  // namespace

TEST_CASE("mesh: data x tensor parallel training equals one process, at every split of the world") {
  auto& world = comm_test::world();
  const std::vector<double> want = single_process_losses();
  for (int ways : {1, 2, 4, 8}) {
    if (world.size() % ways != 0) continue;
    INFO("data ", world.size() / ways, " x tensor ", ways, ", world rank ", world.rank());
    std::vector<double> got;
    switch (ways) {
      case 1: got = mesh_losses<1>(world); break;
      case 2: got = mesh_losses<2>(world); break;
      case 4: got = mesh_losses<4>(world); break;
      default: got = mesh_losses<8>(world); break;
    }
    expect_same_losses(got, want);
    CHECK(want.back() < want.front() - 0.05);  // it learns (the same batch at every step)
  }
}

TEST_CASE("mesh: data x tensor parallel training with ZeRO-1, 2 and 3 equals one process, the norm over shards and slices") {
  auto& world = comm_test::world();
  const std::vector<double> want = single_process_losses();
  for (int stage : {1, 2, 3})
    for (int ways : {1, 2, 4}) {
      if (world.size() % ways != 0) continue;
      INFO("data ", world.size() / ways, " (ZeRO-", stage, ") x tensor ", ways, ", world rank ", world.rank());
      switch (ways) {
        case 1: expect_same_losses(mesh_losses<1>(world, stage), want); break;
        case 2: expect_same_losses(mesh_losses<2>(world, stage), want); break;
        default: expect_same_losses(mesh_losses<4>(world, stage), want); break;
      }
    }
}

namespace {
// Eight layers (up to 8 pipeline stages), narrow.
using deep_mlp = nn::sequential<nn::features<12>, nn::linear<12, 16, nn::relu>, nn::linear<16, 16, nn::gelu_tanh>,
                                nn::linear<16, 12, nn::relu>, nn::linear<12, 12, nn::relu>, nn::linear<12, 8, nn::relu>,
                                nn::linear<8, 8, nn::relu>, nn::linear<8, 8, nn::tanh_activation>, nn::linear<8, 5>>;
using deep_input = extents<index_t, dynamic, 12>;
constexpr index_t pipeline_batch = 16;

std::vector<double> deep_single_process_losses() {
  using whole_t = nn::network<deep_mlp, fp32, host_space>;
  whole_t whole(pipeline_batch, {.seed = 9});
  fusor::optim::trainer<whole_t, fusor::optim::adamw> train(whole, options, fusor::optim::adamw_options{});
  train.initialize(host_executor{});
  const auto x = random_tensor<fp32, deep_input, host_space>(deep_input(pipeline_batch), 300);
  const auto labels = random_labels<host_space>(pipeline_batch, 5, 400);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    train.loss().reset(host_executor{});
    train.step(x, labels, host_executor{});
    losses.push_back(train.loss().totals().mean_loss);
  }
  return losses;
}

// `steps` steps of a replica's pipeline on its rows of the global batch
// (inputs of `features` drawn from `x_seed`, labels of `classes` from
// `labels_seed`, as the single-process reference draws them); each step's
// loss averaged over the replicas.
template <class Pipeline, class Grid>
std::vector<double> replica_losses(Pipeline& train, Grid& grid, index_t batch, std::uint32_t x_seed, int classes,
                                   std::uint32_t labels_seed) {
  using input = typename Pipeline::network_type::input_features::batched_extents;
  constexpr index_t features = Pipeline::network_type::input_features::size;
  const index_t rows = batch / grid.shape().data, first = grid.at().data * rows;
  const auto x_all = random_tensor<fp32, input, host_space>(input(batch), x_seed);
  const auto labels_all = random_labels<host_space>(batch, classes, labels_seed);
  tensor<fp32, input, row_major, host_space> x{input(rows)};
  tensor<std::int32_t, flat, row_major, host_space> labels{flat(rows)};
  std::copy_n(x_all.data() + first * features, rows * features, x.data());
  std::copy_n(labels_all.data() + first, rows, labels.data());
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    train.reset_totals(host_executor{});
    train.step(x, labels, host_executor{});
    double loss = train.totals().mean_loss;
    grid.data().all_reduce(view<double, flat>(&loss, 1), fusor::comm::reduction_op::avg).wait();
    losses.push_back(loss);
  }
  return losses;
}

// Each replica's pipeline on its rows; the loss averaged over the replicas.
// ZeRO-1 over the data group in small buckets (ranks' chunks cut across tensors).
std::vector<double> data_pipeline_losses(fusor::comm::mpi& world, int stages, bool zero1) {
  parallel::mesh grid(world, {.data = world.size() / stages, .tensor = 1, .pipeline = stages});
  parallel::pipeline<deep_mlp, fp32, host_space, fusor::optim::adamw, fusor::comm::mpi> train(
      grid.pipeline(), grid.data(), pipeline_batch / grid.shape().data, {.seed = 9}, options,
      fusor::optim::adamw_options{}, {.micro_batches = 2}, {.bucket_bytes = 300, .shard_optimizer_state = zero1});
  train.initialize(host_executor{});
  // The optimizer holds this rank's chunks only where there are replicas to share with.
  train.for_each_optimizer([&](const auto& group, const auto& optimizer, const fusor::optim::state_layout& layout) {
    CHECK(layout.sharded == (zero1 && grid.shape().data > 1));
    index_t held = 0;
    optimizer.for_each_state([&](const auto&, const auto& state) { held = std::max(held, state.size()); });
    if (layout.sharded) CHECK(held < group.size());
  });
  return replica_losses(train, grid, pipeline_batch, 300, 5, 400);
}
}  // namespace

TEST_CASE("mesh: data x pipeline parallel training equals one process, at every split of the world") {
  auto& world = comm_test::world();
  const std::vector<double> want = deep_single_process_losses();
  for (int stages : {1, 2, 4, 8}) {
    if (world.size() % stages != 0) continue;
    for (bool zero1 : {false, true}) {
      INFO("data ", world.size() / stages, " x pipeline ", stages, std::string(zero1 ? ", ZeRO-1" : ""), ", world rank ",
           world.rank());
      const std::vector<double> got = data_pipeline_losses(world, stages, zero1);
      expect_same_losses(got, want);
    }
  }
  CHECK(want.back() < want.front() - 0.05);
}

TEST_CASE("mesh: ZeRO-2/3, PowerSGD and the data options' micro-batches are refused over a pipeline's data group") {
  auto& world = comm_test::world();
  parallel::mesh grid(world, {.data = world.size(), .tensor = 1, .pipeline = 1});
  using pipeline_t = parallel::pipeline<deep_mlp, fp32, host_space, fusor::optim::adamw, fusor::comm::mpi>;
  const auto make = [&](parallel::data_parallel_options o) {
    pipeline_t train(grid.pipeline(), grid.data(), pipeline_batch, {.seed = 9}, options, fusor::optim::adamw_options{},
                     {.micro_batches = 2}, o);
  };
  fusor_test::expect_error<fusor::error>([&] { make({.shard_gradients = true}); },
                                         {"ZeRO-2 (shard_gradients)", "pipeline", "shard_optimizer_state (ZeRO-1)"});
  fusor_test::expect_error<fusor::error>([&] { make({.shard_parameters = true}); }, {"ZeRO-3 (shard_parameters)"});
  fusor_test::expect_error<fusor::error>(
      [&] { make({.communication = parallel::gradient_communication::powersgd}); }, {"PowerSGD", "bf16"});
  fusor_test::expect_error<fusor::error>([&] { make({.micro_batches = 2}); },
                                         {"micro_batches is 2", "pipeline_options::micro_batches"});
}

namespace {
// Data x tensor x pipeline: each replica's pipeline on its rows, every stage's
// layers split over the tensor group.
template <int Ways>
std::vector<double> mesh_3d_losses(fusor::comm::mpi& world, int stages, bool zero1) {
  parallel::mesh grid(world, {.data = world.size() / (Ways * stages), .tensor = Ways, .pipeline = stages});
  using split_mlp = mlp<column<Ways>, row<Ways>>;
  using pipeline_t = parallel::pipeline<split_mlp, fp32, host_space, fusor::optim::adamw, fusor::comm::mpi>;
  using tensor_parallel_t = parallel::tensor_parallel<typename pipeline_t::network_type, fusor::comm::mpi>;
  pipeline_t train(grid.pipeline(), grid.data(), global_batch / grid.shape().data, {.seed = 5}, options,
                   fusor::optim::adamw_options{}, {.micro_batches = 2},
                   {.bucket_bytes = 20000, .shard_optimizer_state = zero1});
  std::vector<std::unique_ptr<tensor_parallel_t>> tp;
  train.for_each_context([&](auto& net) { tp.push_back(std::make_unique<tensor_parallel_t>(net, grid.tensor())); });
  train.reduce_gradient_norm_with(*tp.front());
  train.initialize(host_executor{});
  return replica_losses(train, grid, global_batch, 100, 32, 200);
}
}  // namespace

TEST_CASE("mesh: data x tensor x pipeline training equals one process") {
  auto& world = comm_test::world();
  const std::vector<double> want = single_process_losses();
  for (int ways : {2, 4})
    for (int stages : {2, 4})
      for (bool zero1 : {false, true}) {
        if (world.size() % (ways * stages) != 0) continue;
        INFO("data ", world.size() / (ways * stages), " x tensor ", ways, " x pipeline ", stages,
             std::string(zero1 ? ", ZeRO-1" : ""), ", world rank ", world.rank());
        const std::vector<double> got =
            ways == 2 ? mesh_3d_losses<2>(world, stages, zero1) : mesh_3d_losses<4>(world, stages, zero1);
        expect_same_losses(got, want);
      }
}

TEST_CASE("mesh: a split network trained data-parallel with clipping needs the tensor group's norm") {
  auto& world = comm_test::world();
  if (world.size() % 2 != 0) return;
  parallel::mesh grid(world, {.data = world.size() / 2, .tensor = 2, .pipeline = 1});
  using split_t = nn::network<mlp<column<2>, row<2>>, fp32, host_space>;
  split_t net(global_batch / grid.shape().data, {.seed = 5});
  parallel::tensor_parallel tp(net, grid.tensor());
  parallel::data_parallel<split_t, fusor::optim::adamw, fusor::comm::mpi> dp(net, grid.data(), options,
                                                                               fusor::optim::adamw_options{});
  dp.initialize(host_executor{});
  const auto x = random_tensor<fp32, input_extents, host_space>(input_extents(global_batch), 1);
  const auto labels = random_labels<host_space>(global_batch, 32, 2);
  fusor_test::expect_error<fusor::error>([&] { dp.step(x, labels, host_executor{}); },
                                         {"split 2 ways", "reduce_gradient_norm_with(tp)"});
}
