// Data x tensor parallelism over a mesh (parallel/mesh.hpp) under mpirun: the
// network split over the mesh's tensor group (parallel::tensor_parallel),
// trained data-parallel over its data group (parallel::data_parallel, the
// tensor group making the clipped norm global), against optim::trainer on one
// process with the whole network and the whole batch: the losses of 5 AdamW
// steps agree within 1e-5 relative (fp32) at every data x tensor split of the
// world (4 ranks: 4x1, 2x2, 1x4; 8 ranks: 8x1, 4x2, 2x4, 1x8). The clip is low
// enough to act at every step, so a norm that is not global shows.
#include <cmath>
#include <string>
#include <vector>

#include <fusor/optim/adamw.hpp>
#include <fusor/parallel/data_parallel.hpp>
#include <fusor/parallel/mesh.hpp>
#include <fusor/parallel/tensor_parallel.hpp>

#include "comm/mpi_world.hpp"
#include "parallel/tensor_parallel_checks.hpp"

using namespace tensor_parallel_test;

namespace {
constexpr index_t global_batch = 24;
constexpr int steps = 5;
const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(1e-2f),
                                            .clip = {.max_norm = 0.05f}};

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

// The same on a data x tensor mesh with `Ways` tensor ranks.
template <int Ways>
std::vector<double> mesh_losses(fusor::comm::mpi& world) {
  parallel::mesh grid(world, {.data = world.size() / Ways, .tensor = Ways, .pipeline = 1});
  using split_t = nn::network<std::conditional_t<Ways == 1, mlp<unsplit, unsplit>, mlp<column<Ways>, row<Ways>>>, fp32,
                              host_space>;
  split_t net(global_batch / grid.shape().data, {.seed = 5});
  std::vector<double> losses;
  const auto train = [&](auto* tp) {
    parallel::data_parallel<split_t, fusor::optim::adamw, fusor::comm::mpi> dp(net, grid.data(), options,
                                                                                 fusor::optim::adamw_options{});
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
    REQUIRE(got.size() == want.size());
    for (std::size_t s = 0; s < want.size(); ++s) {
      INFO("step ", s + 1, ": ", got[s], " against ", want[s]);
      CHECK(std::fabs(got[s] - want[s]) <= 1e-5 * std::fabs(want[s]));
    }
    CHECK(want.back() < want.front() - 0.05);  // it learns (the same batch at every step)
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
