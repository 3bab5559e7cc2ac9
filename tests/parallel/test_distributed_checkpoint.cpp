// parallel::save_distributed / load_distributed under mpirun (4 and 8 ranks):
// a run saved on one mesh resumes on another. Saved after 2 AdamW steps by a
// data x tensor x pipeline mesh ((N/4) x 2 x 2), the next 3 steps' losses are
// bit for bit those of the run that never stopped when resumed on the same
// mesh, and within 1e-5 relative on one process (optim::trainer, whole
// network) and on (N/2) x 1 x 2 (no tensor split). ZeRO-1 state (data_parallel,
// every data rank a range of each tensor's moments) resumes on one process and
// on (N/2) x 2 x 1 without ZeRO, and the other way round. A rank that cannot
// write its shard makes every rank throw, and no manifest is written; a rank
// that refuses its pieces of a load makes every rank refuse it, and so does a
// save holding tensors that no rank reads (AdamW's moments, for SGD).
// PowerSGD's error feedback and warm start resume bit for bit on the same
// mesh, and spread their sum over another number of data ranks.
// Every step sees a different batch, so a resume at the wrong step shows.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include <fusor/optim/adamw.hpp>
#include <fusor/optim/sgd.hpp>
#include <fusor/parallel/data_parallel.hpp>
#include <fusor/parallel/distributed_checkpoint.hpp>
#include <fusor/parallel/mesh.hpp>
#include <fusor/parallel/pipeline.hpp>
#include <fusor/parallel/tensor_parallel.hpp>

#include "comm/mpi_world.hpp"
#include "parallel/tensor_parallel_checks.hpp"
#include "support/checkpoint_edits.hpp"

using namespace tensor_parallel_test;
namespace fs = std::filesystem;

namespace {
constexpr index_t global_batch = 24;
constexpr int saved_after = 2, resumed_steps = 3;
const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(1e-2f),
                                            .clip = {.max_norm = 0.05f}};
using mpi = fusor::comm::mpi;

template <int Ways>
using split_mlp = std::conditional_t<Ways == 1, mlp<unsplit, unsplit>, mlp<column<Ways>, row<Ways>>>;

// Step s's batch: the same on every rank.
auto batch_images(int s) { return random_tensor<fp32, input_extents, host_space>(input_extents(global_batch), 100 + s); }
auto batch_labels(int s) { return random_labels<host_space>(global_batch, 32, 200 + std::uint32_t(s)); }

void barrier(mpi& world) { MPI_Barrier(world.native()); }

// A folder every rank agrees on (rank 0's pid), emptied.
fs::path shared_folder(mpi& world, const std::string& what) {
  std::int32_t id = static_cast<std::int32_t>(getpid());
  world.broadcast(view<std::int32_t, flat>(&id, 1), 0).wait();
  const fs::path dir = fs::temp_directory_path() / ("fusor_dcp_" + std::to_string(id) + "_" + what);
  barrier(world);
  if (world.rank() == 0) fs::remove_all(dir);
  barrier(world);
  return dir;
}

void expect_losses(const std::vector<double>& got, const std::vector<double>& want, bool bitwise) {
  REQUIRE(got.size() == want.size());
  for (std::size_t s = 0; s < want.size(); ++s) {
    INFO("step ", saved_after + int(s) + 1, ": ", got[s], " against ", want[s]);
    if (bitwise) CHECK(got[s] == want[s]);
    else CHECK(std::fabs(got[s] - want[s]) <= 1e-5 * std::fabs(want[s]));
  }
}

// What to do around the steps: save after `saved_after` steps, or load before the first.
struct plan {
  fs::path save_to, load_from;
  int first_step = 0, last_step = saved_after + resumed_steps;
};
plan saving(const fs::path& dir, int last_step = saved_after + resumed_steps) { return {dir, {}, 0, last_step}; }
plan resuming(const fs::path& dir) { return {{}, dir, saved_after, saved_after + resumed_steps}; }

// Runs the steps [first_step, last_step) of `train` (step(s) runs step s and
// returns its loss), saving or loading as `p` says; returns the losses after
// the save point.
// observe(train) right after the save or the load.
template <class Trainer, class Step, class Observe = decltype([](Trainer&) {})>
std::vector<double> run(Trainer& train, mpi& world, const parallel::checkpoint_rank& where, const plan& p, Step&& step,
                        Observe&& observe = {}) {
  train.initialize(host_executor{});
  if (!p.load_from.empty()) {
    // A mesh trainer loads as a collective over the world (every rank, or none); one process on its own.
    const auto meta = where.world_size() == world.size()
                          ? parallel::load_distributed(p.load_from, train, world, where, host_executor{})
                          : parallel::load_distributed(p.load_from, train, where, host_executor{});
    CHECK(meta.at("epoch") == "7");
    CHECK(train.steps_taken() == std::uint64_t(p.first_step));
    observe(train);
  }
  std::vector<double> losses;
  for (int s = p.first_step; s < p.last_step; ++s) {
    const double loss = step(s);
    if (s >= saved_after) losses.push_back(loss);
    if (s + 1 == saved_after && !p.save_to.empty()) {
      parallel::save_distributed(p.save_to, train, world, where, "step-2", {{"epoch", "7"}}, host_executor{});
      observe(train);
    }
  }
  return losses;
}

// One process, the whole network and batch (each rank on its own; no communication).
std::vector<double> single_process(mpi& world, const plan& p) {
  using whole_t = nn::network<split_mlp<1>, fp32, host_space>;
  whole_t whole(global_batch, {.seed = 5});
  fusor::optim::trainer<whole_t, fusor::optim::adamw> train(whole, options, fusor::optim::adamw_options{});
  return run(train, world, parallel::single_process, p, [&](int s) {
    train.loss().reset(host_executor{});
    train.step(batch_images(s), batch_labels(s), host_executor{});
    return train.loss().totals().mean_loss;
  });
}

// Data x tensor x pipeline: each replica's pipeline on its rows of the batch,
// every stage's layers split over the tensor group; the loss averaged over replicas.
// ZeRO-1 over the data group when `zero1` says so.
template <int Ways>
std::vector<double> mesh_3d(mpi& world, parallel::mesh_shape shape, const plan& p, bool zero1 = false) {
  parallel::mesh grid(world, shape);
  using pipeline_t = parallel::pipeline<split_mlp<Ways>, fp32, host_space, fusor::optim::adamw, mpi>;
  using tensor_parallel_t = parallel::tensor_parallel<typename pipeline_t::network_type, mpi>;
  pipeline_t train(grid.pipeline(), grid.data(), global_batch / shape.data, {.seed = 5}, options,
                   fusor::optim::adamw_options{}, {.micro_batches = 2},
                   {.bucket_bytes = 20000, .shard_optimizer_state = zero1});
  std::vector<std::unique_ptr<tensor_parallel_t>> tp;
  if constexpr (Ways > 1) {
    train.for_each_context([&](auto& net) { tp.push_back(std::make_unique<tensor_parallel_t>(net, grid.tensor())); });
    train.reduce_gradient_norm_with(*tp.front());
  }
  const index_t rows = global_batch / shape.data, first = grid.at().data * rows;
  return run(train, world, parallel::checkpoint_rank_of(grid), p, [&](int s) {
    const auto x_all = batch_images(s);
    const auto labels_all = batch_labels(s);
    tensor<fp32, input_extents, row_major, host_space> x{input_extents(rows)};
    tensor<std::int32_t, flat, row_major, host_space> labels{flat(rows)};
    std::copy_n(x_all.data() + first * 64, rows * 64, x.data());
    std::copy_n(labels_all.data() + first, rows, labels.data());
    train.reset_totals(host_executor{});
    train.step(x, labels, host_executor{});
    double loss = train.totals().mean_loss;
    grid.data().all_reduce(view<double, flat>(&loss, 1), fusor::comm::reduction_op::avg).wait();
    return loss;
  });
}

// PowerSGD's error feedback over the world: the sum and the sum of magnitudes
// of every element, each data rank's counted, each unsplit matrix once.
struct error_feedback_totals {
  double sum = 0, magnitude = 0;
};

// Data x tensor, data-parallel (ZeRO-1, 2 or 3 when `zero_stage` says so,
// in small buckets so that ranks' ranges cut across tensors; or with PowerSGD
// at rank 4, every weight matrix compressed, its error feedback's totals
// appended to `totals` after the save or the load).
template <int Ways>
std::vector<double> data_tensor(mpi& world, int zero_stage, const plan& p, bool powersgd = false,
                                std::vector<error_feedback_totals>* totals = nullptr) {
  parallel::mesh grid(world, {.data = world.size() / Ways, .tensor = Ways, .pipeline = 1});
  using net_t = nn::network<split_mlp<Ways>, fp32, host_space>;
  net_t net(global_batch / grid.shape().data, {.seed = 5});
  std::unique_ptr<parallel::tensor_parallel<net_t, mpi>> tp;
  if constexpr (Ways > 1) tp = std::make_unique<parallel::tensor_parallel<net_t, mpi>>(net, grid.tensor());
  parallel::data_parallel<net_t, fusor::optim::adamw, mpi> train(
      net, grid.data(), options, fusor::optim::adamw_options{},
      {.bucket_bytes = 20000,
       .communication = powersgd ? parallel::gradient_communication::powersgd : parallel::gradient_communication::native,
       .shard_optimizer_state = zero_stage == 1,
       .powersgd = {.rank = 4},
       .shard_gradients = zero_stage == 2,
       .shard_parameters = zero_stage == 3});
  if (tp) train.reduce_gradient_norm_with(*tp);
  const auto observe = [&](auto& t) {
    if (!totals) return;
    error_feedback_totals mine;
    int matrices = 0;
    t.for_each_compression_state([&](const auto&, const nn::parameter_slot& slot, const auto& e, const auto&) {
      ++matrices;
      if (!net.placement(slot).split && grid.at().tensor != 0) return;
      for (index_t i = 0; i < index_t(e.size()); ++i) mine.sum += e.data()[i], mine.magnitude += std::fabs(e.data()[i]);
    });
    CHECK(matrices == 4);
    world.all_reduce(view<double, flat>(&mine.sum, 1), fusor::comm::reduction_op::sum).wait();
    world.all_reduce(view<double, flat>(&mine.magnitude, 1), fusor::comm::reduction_op::sum).wait();
    totals->push_back(mine);
  };
  return run(
      train, world, parallel::checkpoint_rank_of(grid), p,
      [&](int s) {
        train.loss().reset(host_executor{});
        train.step(batch_images(s), batch_labels(s), host_executor{});
        return train.totals().mean_loss;
      },
      observe);
}

int ranks_ok(mpi& world) { return world.size() % 4 == 0; }
}  // namespace

TEST_CASE("distributed checkpoint: a data x tensor x pipeline save resumes on the same mesh, one process and another mesh") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  const fs::path dir = shared_folder(world, "3d");
  const parallel::mesh_shape saving_mesh{.data = world.size() / 4, .tensor = 2, .pipeline = 2};
  const std::vector<double> uninterrupted = mesh_3d<2>(world, saving_mesh, saving(dir));
  REQUIRE(fs::exists(dir / "manifest.safetensors"));
  const plan resume = resuming(dir);

  INFO("saved on ", to_string(saving_mesh), ", world rank ", world.rank());
  SUBCASE("the same mesh: bit for bit") { expect_losses(mesh_3d<2>(world, saving_mesh, resume), uninterrupted, true); }
  SUBCASE("one process") { expect_losses(single_process(world, resume), uninterrupted, false); }
  SUBCASE("data x pipeline, no tensor split") {
    expect_losses(mesh_3d<1>(world, {.data = world.size() / 2, .tensor = 1, .pipeline = 2}, resume), uninterrupted, false);
  }
  SUBCASE("data x pipeline, ZeRO-1 over the data group") {
    expect_losses(mesh_3d<1>(world, {.data = world.size() / 2, .tensor = 1, .pipeline = 2}, resume, true),
                  uninterrupted, false);
  }
  barrier(world);
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("distributed checkpoint: a data x tensor x pipeline save under ZeRO-1 resumes bit for bit, and without ZeRO") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  const fs::path dir = shared_folder(world, "3d-zero1");
  const parallel::mesh_shape saving_mesh{.data = world.size() / 4, .tensor = 2, .pipeline = 2};
  const std::vector<double> uninterrupted = mesh_3d<2>(world, saving_mesh, saving(dir), true);
  const plan resume = resuming(dir);
  INFO("saved on ", to_string(saving_mesh), " with ZeRO-1, world rank ", world.rank());
  expect_losses(mesh_3d<2>(world, saving_mesh, resume, true), uninterrupted, true);
  expect_losses(single_process(world, resume), uninterrupted, false);
  expect_losses(mesh_3d<1>(world, {.data = world.size() / 2, .tensor = 1, .pipeline = 2}, resume), uninterrupted, false);
  barrier(world);
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("distributed checkpoint: ZeRO-1, 2 and 3 state resumes without ZeRO, and the other way round") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  SUBCASE("saved by ZeRO-1 over every rank") {
    const fs::path dir = shared_folder(world, "zero");
    const std::vector<double> uninterrupted = data_tensor<1>(world, 1, saving(dir));
    const plan p = resuming(dir);
    expect_losses(data_tensor<1>(world, 1, p), uninterrupted, true);
    expect_losses(single_process(world, p), uninterrupted, false);
    expect_losses(data_tensor<2>(world, 0, p), uninterrupted, false);
    expect_losses(data_tensor<2>(world, 2, p), uninterrupted, false);
    barrier(world);
    if (world.rank() == 0) fs::remove_all(dir);
  }
  SUBCASE("saved by ZeRO-2 over every rank") {
    const fs::path dir = shared_folder(world, "zero2");
    const std::vector<double> uninterrupted = data_tensor<1>(world, 2, saving(dir));
    const plan p = resuming(dir);
    expect_losses(data_tensor<1>(world, 2, p), uninterrupted, true);
    expect_losses(data_tensor<2>(world, 1, p), uninterrupted, false);
    expect_losses(data_tensor<2>(world, 3, p), uninterrupted, false);
    barrier(world);
    if (world.rank() == 0) fs::remove_all(dir);
  }
  SUBCASE("saved by ZeRO-3 over every rank: parameters from the shards") {
    const fs::path dir = shared_folder(world, "zero3");
    const std::vector<double> uninterrupted = data_tensor<1>(world, 3, saving(dir));
    const plan p = resuming(dir);
    expect_losses(data_tensor<1>(world, 3, p), uninterrupted, true);
    expect_losses(single_process(world, p), uninterrupted, false);
    expect_losses(data_tensor<2>(world, 0, p), uninterrupted, false);
    barrier(world);
    if (world.rank() == 0) fs::remove_all(dir);
  }
  SUBCASE("saved by data x tensor, resumed by ZeRO-1") {
    const fs::path dir = shared_folder(world, "tensor");
    const std::vector<double> uninterrupted = data_tensor<2>(world, 0, saving(dir));
    const plan p = resuming(dir);
    expect_losses(data_tensor<1>(world, 1, p), uninterrupted, false);
    barrier(world);
    if (world.rank() == 0) fs::remove_all(dir);
  }
}

// The saved error feedback's totals `saved`, spread over another number of data
// ranks (`loaded`): the same sum, the magnitudes no larger.
void expect_spread(const std::vector<error_feedback_totals>& saved, const std::vector<error_feedback_totals>& loaded) {
  REQUIRE(saved.size() == 1);
  REQUIRE(loaded.size() == 1);
  INFO("saved: sum ", saved[0].sum, ", magnitude ", saved[0].magnitude, "; loaded: sum ", loaded[0].sum, ", magnitude ",
       loaded[0].magnitude);
  CHECK(saved[0].magnitude > 0);
  CHECK(std::fabs(loaded[0].sum - saved[0].sum) <= 1e-5 * saved[0].magnitude);
  CHECK(loaded[0].magnitude > 0);
  CHECK(loaded[0].magnitude <= saved[0].magnitude * (1 + 1e-5));
}

// PowerSGD saved by data x tensor split `SavedWays` ways: resumed on the same
// mesh the losses are the uninterrupted run's bit for bit; resumed with the
// split `OtherWays` (another number of data ranks) the error feedback's sum is
// kept; `without_powersgd`: a trainer without PowerSGD loads the save too.
template <int SavedWays, int OtherWays>
void check_powersgd_resume(mpi& world, const std::string& what, bool without_powersgd) {
  const bool powersgd = true;
  const fs::path dir = shared_folder(world, what);
  std::vector<error_feedback_totals> saved, loaded;
  const std::vector<double> uninterrupted = data_tensor<SavedWays>(world, 0, saving(dir), powersgd, &saved);
  const plan p = resuming(dir);
  expect_losses(data_tensor<SavedWays>(world, 0, p, powersgd), uninterrupted, true);
  data_tensor<OtherWays>(world, 0, p, powersgd, &loaded);
  expect_spread(saved, loaded);
  if (without_powersgd) data_tensor<SavedWays>(world, 0, p);  // its state is left aside
  barrier(world);
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("distributed checkpoint: PowerSGD's error feedback and warm start resume bit for bit, or spread over other data ranks") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  SUBCASE("saved by data parallel over every rank") {
    check_powersgd_resume<1, 2>(world, "powersgd", true);  // resumed on half the data ranks, each matrix split in two
  }
  SUBCASE("saved by data x tensor") { check_powersgd_resume<2, 1>(world, "powersgd_tensor", false); }
  SUBCASE("saved without PowerSGD: the error feedback starts at zero") {
    const fs::path dir = shared_folder(world, "powersgd_none");
    std::vector<error_feedback_totals> loaded;
    data_tensor<1>(world, 0, saving(dir));
    data_tensor<1>(world, 0, resuming(dir), /*powersgd=*/true, &loaded);
    REQUIRE(loaded.size() == 1);
    CHECK(loaded[0].magnitude == 0);
    barrier(world);
    if (world.rank() == 0) fs::remove_all(dir);
  }
}

TEST_CASE("distributed checkpoint: a rank that refuses its pieces makes every rank refuse the load, none loading") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  const fs::path dir = shared_folder(world, "refused"), damaged = dir.string() + "_damaged";
  (void)data_tensor<2>(world, 0, saving(dir, saved_after));
  // A copy whose shard 0 holds a zero loss scale (every rank reads it); only rank 1 is given the copy.
  if (world.rank() == 0) {
    fs::remove_all(damaged);
    fs::copy(dir, damaged);
    const fs::path shard = damaged / ("shard-00000-of-0000" + std::to_string(world.size()) + ".safetensors");
    const fusor::io::safetensors_file good = fusor::io::checkpoint_reader(shard).contents();
    fusor_test::write_edited(good, shard, [](fusor::io::tensor_record& t) {
      if (t.name == "controller.loss_scale") fusor_test::set_element(t, 0, 0);
      return true;
    });
    fusor_test::record_shard_hash(damaged, 0, shard);
  }
  barrier(world);
  const std::string one_refused = "1 of " + std::to_string(world.size()) + " ranks refused";
  std::string message;
  try {
    (void)data_tensor<2>(world, 0, resuming(world.rank() == 1 ? damaged : dir));
  } catch (const fusor::io::checkpoint_error& e) {
    message = e.what();
  }
  INFO("rank ", world.rank(), ": ", message);
  CHECK(message.find(one_refused) != std::string::npos);
  CHECK(message.find("no rank loaded anything") != std::string::npos);
  // Every rank names the refusing rank and its reason, so that a job that logs one rank reads the cause.
  CHECK(message.find("; rank 1: ") != std::string::npos);
  CHECK(message.find("'controller.loss_scale' is 0") != std::string::npos);
  // The good save still loads on every rank, and resumes as it should.
  const std::vector<double> want = data_tensor<2>(world, 0, saving(dir.string() + "_straight"));
  expect_losses(data_tensor<2>(world, 0, resuming(dir)), want, true);
  barrier(world);
  if (world.rank() == 0) {
    fs::remove_all(dir);
    fs::remove_all(damaged);
    fs::remove_all(dir.string() + "_straight");
  }
}

TEST_CASE("distributed checkpoint: tensors that no rank reads make every rank refuse the load, unless told to ignore them") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  const fs::path dir = shared_folder(world, "unread");
  const parallel::mesh_shape shape{.data = world.size() / 2, .tensor = 1, .pipeline = 2};
  (void)mesh_3d<1>(world, shape, saving(dir, saved_after));  // AdamW: two moments per parameter
  // The same pipeline with plain SGD (no state): each stage reads its own layers' parameters, so only the
  // ranks together know that the moments are read by none of them.
  parallel::mesh grid(world, shape);
  using sgd_pipeline = parallel::pipeline<split_mlp<1>, fp32, host_space, fusor::optim::sgd, mpi>;
  sgd_pipeline train(grid.pipeline(), grid.data(), global_batch / shape.data, {.seed = 5}, options,
                     fusor::optim::sgd_options{}, {.micro_batches = 2});
  train.initialize(host_executor{});
  const parallel::checkpoint_rank where = parallel::checkpoint_rank_of(grid);
  INFO("world rank ", world.rank());
  fusor_test::expect_error<fusor::io::checkpoint_error>(
      [&] { parallel::load_distributed(dir, train, world, where, host_executor{}); },
      {"that no rank of this trainer reads", ".exp_avg'", "nothing was loaded", "unread_tensors::ignore"});
  CHECK(train.steps_taken() == 0);
  const auto meta =
      parallel::load_distributed(dir, train, world, where, host_executor{}, fusor::optim::unread_tensors::ignore);
  CHECK(meta.at("epoch") == "7");
  CHECK(train.steps_taken() == std::uint64_t(saved_after));
  barrier(world);
  if (world.rank() == 0) fs::remove_all(dir);
}

TEST_CASE("distributed checkpoint: a rank that cannot write its shard fails the save on every rank") {
  auto& world = comm_test::world();
  if (!ranks_ok(world)) return;
  const fs::path dir = shared_folder(world, "failing");
  // Rank 1's shard file cannot be made: a folder stands where it would go.
  if (world.rank() == 0)
    fs::create_directories(dir / ("shard-00001-of-0000" + std::to_string(world.size()) + ".safetensors") / "in-the-way");
  barrier(world);
  const std::string one_failed = "1 of " + std::to_string(world.size()) + " ranks could not save";
  fusor_test::expect_error<fusor::io::checkpoint_error>(
      [&] { (void)data_tensor<1>(world, 0, saving(dir, saved_after)); },
      {one_failed.c_str(), "; rank 1: ", "shard-00001-of-0000", "no manifest written"});
  barrier(world);
  CHECK(!fs::exists(dir / "manifest.safetensors"));
  fusor_test::expect_error<fusor::io::checkpoint_error>(
      [&] { (void)single_process(world, resuming(dir)); }, {"has no manifest"});
  barrier(world);
  if (world.rank() == 0) fs::remove_all(dir);
}
