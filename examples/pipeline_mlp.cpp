// examples/pipeline_mlp.cpp — pipeline parallelism: a five-layer MLP trained on
// Fashion-MNIST with its layers split over the ranks of an MPI job, one stage
// per rank, each batch cut into micro-batches that flow through the stages
// with the GPipe or the 1F1B schedule.
//
//   mpirun -np 4 pipeline_mlp --schedule 1f1b --micro-batches 8   # CPUs: MPI, 4 stages
//   mpirun -np 2 pipeline_mlp --schedule gpipe --stage-map 0,1    # the first layer alone on rank 0
//   mpirun -np 2 pipeline_mlp_cuda                                # GPUs: NCCL, one GPU per rank
//   pipeline_mlp                                                  # one process: one stage
//
// Every rank reads the same shuffled batches (same seed); stage 0 uses the
// images, the last stage the labels. The last stage's loss and accuracy are
// broadcast and rank 0 prints them, with every rank's measured idle time (time
// blocked waiting for a neighbour over the epoch's step time) beside the ideal
// bubble (p - 1) / (m + p - 1) of the step, i.e. (p - 1) / m of the compute.
// On GPUs (the _cuda build, bf16 with fp32 master weights) messages are ordered
// on the stream and the host never waits, so the idle time shows as 0 there.
// Data: Debian's dataset-fashion-mnist (or --data DIR).
// Extra options: --schedule 1f1b|gpipe, --micro-batches M, --stage-map A,B,...;
// the others are fashion_mnist_mlp's (--help lists them all, with their ranges). --checkpoint names a folder of
// saves, each stage saving its layers (see fashion_mnist_training.hpp);
// --resume continues on any number of stages.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fusor/comm/mpi.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/parallel/pipeline.hpp>
#if FUSOR_HAS_CUDA
#include <fusor/comm/nccl.hpp>
#endif

#include "distributed_training.hpp"

namespace {

namespace fs = fusor;
namespace nn = fusor::nn;
namespace parallel = fusor::parallel;

// 784-512-256-256-128-10: five layers, so four stages get at least one each.
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu>, nn::linear<512, 256, nn::relu>,
                           nn::linear<256, 256, nn::relu>, nn::linear<256, 128, nn::relu>, nn::linear<128, 10>>;

// The options this example adds to the Fashion-MNIST ones, declared on the same command line.
void declare_pipeline_options(fs::app::command_line& cli, parallel::pipeline_options& p) {
  cli.choice("--schedule", p.schedule,
             {{"1f1b", parallel::pipeline_schedule::one_forward_one_backward}, {"gpipe", parallel::pipeline_schedule::gpipe}},
             "pipeline schedule")
      .number("--micro-batches", p.micro_batches, "micro-batches per batch (must divide --batch)",
              fs::app::between<fs::index_t>(1, 4096))
      .numbers("--stage-map", p.stage_starts, "first layer of each stage, one per rank (default: layers split evenly)",
               fs::app::at_least<std::size_t>(0));
}

// What the options mean together, for `stages` ranks: a usage_error otherwise.
void check_pipeline_options(const example::options& o, const parallel::pipeline_options& p, int stages) {
  if (o.batch % p.micro_batches != 0)
    throw fs::app::usage_error("--micro-batches " + std::to_string(p.micro_batches) + " does not divide --batch " +
                               std::to_string(o.batch));
  if (p.stage_starts.empty()) return;
  const std::size_t layers = mlp::depth;
  bool increasing = p.stage_starts.front() == 0;
  for (std::size_t i = 1; i < p.stage_starts.size(); ++i) increasing = increasing && p.stage_starts[i] > p.stage_starts[i - 1];
  if (p.stage_starts.size() != std::size_t(stages) || !increasing || p.stage_starts.back() >= layers)
    throw fs::app::usage_error("--stage-map needs " + std::to_string(stages) +
                               " first layers (one per rank), from 0, increasing, each below " + std::to_string(layers) +
                               " (the MLP's layers)");
}

// Trains with `stages` (the communicator the messages travel on); `world` (MPI)
// gathers each rank's idle time for rank 0 to print.
template <class Precision, class Space, class Communicator, class Executor>
int train(const example::options& o, const parallel::pipeline_options& p, fs::comm::mpi& world, Communicator& stages,
          const Executor& ex, fs::stream_t stream, const std::string& device) {
  const auto [train_set, test_set] = example::load_data(o);
  const fs::index_t steps_per_epoch = train_set.count / o.batch;  // the last partial batch is dropped

  parallel::pipeline<mlp, Precision, Space, fs::optim::adamw, Communicator> pipe(
      stages, o.batch, {.seed = o.seed, .stream = stream},
      {.schedule = fs::optim::learning_rate_schedule::warmup_cosine(o.learning_rate, steps_per_epoch / 2,
                                                                    steps_per_epoch * o.epochs),
       .stream = stream},
      fs::optim::adamw_options{.weight_decay = o.weight_decay}, p);
  pipe.initialize(ex);
  const parallel::checkpoint_rank where{{.pipeline = world.size()}, {.pipeline = world.rank()}};
  // This stage's shard, about: fp32 weights and AdamW's two moments.
  const std::uint64_t shard_bytes = std::uint64_t(pipe.network().parameter_count()) * 3 * sizeof(float);
  const int first_epoch = example::resume_distributed(o, pipe, world, where, ex, world.rank() == 0, shard_bytes);
  fs::data::loader<Space> train_loader(train_set, example::loader_settings(o, true), stream);
  fs::data::loader<Space> test_loader(test_set, example::loader_settings(o, false), stream);

  const parallel::pipeline_report shape = pipe.report();
  if (world.rank() == 0)
    std::printf("fusor pipeline: MLP 784-512-256-256-128-10 on %s, %d stage(s), %s, %lld micro-batches of %lld\n"
                "  %lld training / %lld test images, batch %lld, AdamW lr %g (warmup + cosine), %d epochs\n",
                device.c_str(), shape.stages, parallel::name(shape.schedule), (long long)shape.micro_batches,
                (long long)pipe.micro_batch_size(), (long long)train_set.count, (long long)test_set.count,
                (long long)o.batch, o.learning_rate, o.epochs);
  // Every rank's layers, gathered for rank 0 (world is host memory whatever carries the stages).
  std::vector<double> gathered(std::size_t(2 * world.size()));
  auto gather = [&](double a, double b) {
    double mine[2] = {a, b};
    world.all_gather(fs::view<double, fs::dextents<fs::index_t, 1>>(mine, 2),
                     fs::view<double, fs::dextents<fs::index_t, 1>>(gathered.data(), 2 * world.size()))
        .wait();
  };
  gather(double(shape.layers.first), double(shape.layers.last));
  if (world.rank() == 0)
    for (int r = 0; r < world.size(); ++r)
      std::printf("  stage %d: layers [%.0f, %.0f), %lld micro-batch context(s)\n", r, gathered[std::size_t(2 * r)],
                  gathered[std::size_t(2 * r + 1)], (long long)parallel::pipeline_contexts(shape.schedule, r, shape.stages, shape.micro_batches));

  const auto evaluate_test = [&] {
    pipe.reset_totals(ex);
    test_loader.start_epoch(0);
    while (const auto* batch = test_loader.next()) pipe.evaluate(batch->images, batch->labels, ex);
    return pipe.totals();
  };
  // Resumed after the last epoch: nothing to train, the saved network is measured.
  nn::loss_totals test = first_epoch < o.epochs ? nn::loss_totals{} : evaluate_test();
  for (int epoch = first_epoch; epoch < o.epochs; ++epoch) {
    pipe.reset_totals(ex);
    train_loader.start_epoch(std::uint64_t(epoch));
    double idle_seconds = 0, step_seconds = 0;
    const auto start = std::chrono::steady_clock::now();
    while (const auto* batch = train_loader.next()) {
      pipe.step(batch->images, batch->labels, ex);
      const parallel::pipeline_report r = pipe.report();
      idle_seconds += r.idle_fraction * r.step_seconds;
      step_seconds += r.step_seconds;
    }
    example::wait(ex);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const nn::loss_totals trained = pipe.totals();

    test = evaluate_test();
    gather(step_seconds > 0 ? idle_seconds / step_seconds : 0.0, seconds);
    if (world.rank() == 0) {
      example::report_epoch(o, epoch, trained, test, seconds);
      if (!o.quiet || epoch + 1 == o.epochs) {
        std::printf("  idle (waiting for a neighbour) per stage:");
        for (int r = 0; r < world.size(); ++r) std::printf(" %.1f%%", 100 * gathered[std::size_t(2 * r)]);
        std::printf("  vs bubble (p-1)/(m+p-1) = %.1f%% of a step, (p-1)/m = %.3f\n", 100 * shape.bubble_share_of_step,
                    shape.bubble_fraction);
      }
      std::fflush(stdout);
    }
    example::save_distributed_epoch(o, pipe, world, where, epoch, ex);
  }
  return example::verdict(o, test, device, world.rank() == 0);
}

}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    return example::on_every_rank(world.rank(), [&] {
      parallel::pipeline_options p;
      const std::optional<example::options> o = example::parse(
          argc, argv, {.checkpoint_folder = true},
          [&](fs::app::command_line& cli) { declare_pipeline_options(cli, p); },
          "Trains a five-layer MLP pipeline-parallel, one stage per MPI rank (per GPU over NCCL in the _cuda build).",
          world.rank() == 0);
      if (!o) return 0;
      check_pipeline_options(*o, p, world.size());
#if FUSOR_HAS_CUDA
      if (o->device != "host" && fs::gpu::available()) {
        // One GPU per rank (by local rank); NCCL carries the stages' messages.
        fs::comm::use_local_device(world);  // visible device local_rank % count, said on stderr
        cudaStream_t stream{};
        FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        int status = 0;
        {
          auto gpus = fs::comm::nccl::over(world, stream);
          status = train<fs::bf16, fs::device_space>(*o, p, world, gpus, fs::cuda_executor{stream}, stream,
                                                    "GPUs (NCCL, bf16)");
        }
        FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
        return status;
      }
#endif
      if (o->device == "cuda")
        throw fs::app::usage_error("--device cuda, but no CUDA GPU (or no CUDA build: use the _cuda program)");
      return train<fs::fp32, fs::host_space>(*o, p, world, world, fs::host_executor{}, fs::stream_t{},
                                             "CPUs (MPI, fp32)");
    });
  });
}
