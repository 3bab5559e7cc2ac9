// bench/pipeline_host.cpp — the pipeline's measured idle time against its
// bubble, on the host over MPI: one stage per rank of a network of eight equal
// layers (512 -> 512, ReLU; the loss over 512 classes), so that the stages cost
// the same and the schedule's bubble is the only reason for a stage to wait.
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
//     mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/bench_pipeline_host [--steps 20]
//
// For GPipe and 1F1B and m = 2, 4, 8 micro-batches of a global batch of 256,
// rank 0 prints a Markdown row: step time, each stage's idle fraction (time
// blocked waiting for a neighbour over its step time, mean over the timed
// steps) and the ideal (p - 1) / (m + p - 1) of a step, i.e. (p - 1) / m of the
// compute. With more ranks than cores the ranks also wait for a core, and that
// shows as idle time too.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fusor/app/command_line.hpp>
#include <fusor/comm/mpi.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/parallel/pipeline.hpp>

namespace fs = fusor;
namespace nn = fusor::nn;
namespace parallel = fusor::parallel;

namespace {
using wide = nn::linear<512, 512, nn::relu>;
using uniform_mlp = nn::sequential<nn::features<512>, wide, wide, wide, wide, wide, wide, wide, nn::linear<512, 512>>;
constexpr fs::index_t global_batch = 256;

void run(fs::comm::mpi& world, parallel::pipeline_schedule schedule, fs::index_t m, int steps) {
  fs::tensor<float, fs::dextents<fs::index_t, 2>> images(fs::dextents<fs::index_t, 2>(global_batch, 512));
  fs::tensor<std::int32_t, fs::dextents<fs::index_t, 1>> labels{fs::dextents<fs::index_t, 1>(global_batch)};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (fs::index_t i = 0; i < images.size(); ++i) images.data()[i] = uniform(rng);
  for (fs::index_t i = 0; i < global_batch; ++i) labels.data()[i] = std::int32_t(rng() % 512);

  parallel::pipeline<uniform_mlp, fs::fp32, fs::host_space, fs::optim::adamw, fs::comm::mpi> pipe(
      world, global_batch, {.seed = 1}, {}, fs::optim::adamw_options{}, {.micro_batches = m, .schedule = schedule});
  pipe.initialize(fs::host_executor{});
  double idle = 0, seconds = 0;
  for (int step = -3; step < steps; ++step) {  // three untimed steps first
    pipe.step(images, labels, fs::host_executor{});
    if (step < 0) continue;
    const parallel::pipeline_report r = pipe.report();
    idle += r.idle_fraction * r.step_seconds;
    seconds += r.step_seconds;
  }
  double mine[2] = {idle / seconds, seconds / steps};
  std::vector<double> all(std::size_t(2 * world.size()));
  world.all_gather(fs::view<double, fs::dextents<fs::index_t, 1>>(mine, 2),
                   fs::view<double, fs::dextents<fs::index_t, 1>>(all.data(), 2 * world.size()))
      .wait();
  if (world.rank() != 0) return;
  double slowest = 0;
  std::string idles;
  for (int r = 0; r < world.size(); ++r) {
    slowest = std::max(slowest, all[std::size_t(2 * r + 1)]);
    char cell[16];
    std::snprintf(cell, sizeof cell, "%s%.0f%%", r ? " / " : "", 100 * all[std::size_t(2 * r)]);
    idles += cell;
  }
  const parallel::pipeline_report r = pipe.report();
  std::printf("| %d | %s | %lld | %.1f | %s | %.0f%% | %.2f |\n", world.size(), parallel::name(schedule), (long long)m,
              1e3 * slowest, idles.c_str(), 100 * r.bubble_share_of_step, r.bubble_fraction);
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    int steps = 20;
    const bool go_on = fs::app::command_line("Pipeline-parallel MLP steps over MPI ranks, GPipe and 1F1B.")
        .number("--steps", steps, "timed steps", fs::app::at_least(1))
        .parse(argc, argv);  // false after --help; a mistake throws (run_ranks ends the job)
    if (!go_on) return 0;
    if (world.rank() == 0)
      std::printf("| ranks | schedule | m | step ms | idle per stage | bubble of step (p-1)/(m+p-1) | (p-1)/m |\n"
                  "|---|---|---|---|---|---|---|\n");
    for (auto schedule : {parallel::pipeline_schedule::gpipe, parallel::pipeline_schedule::one_forward_one_backward})
      for (fs::index_t m : {2, 4, 8}) run(world, schedule, m, steps);
    return 0;
  });
}
