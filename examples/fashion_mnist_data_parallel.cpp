// examples/fashion_mnist_data_parallel.cpp — the main job's MLP (fashion_mnist_mlp)
// trained data-parallel: every rank holds the network, takes its share of each
// global batch of 128, and the gradients are summed over ranks in buckets while
// backward still runs. Rank 0 prints.
//
//   mpirun -np 4 build/examples/fashion_mnist_data_parallel            # CPUs, MPI
//   mpirun -np 4 build/examples/fashion_mnist_data_parallel_cuda       # one GPU a rank, NCCL
//   mpirun -np 2 build/examples/fashion_mnist_data_parallel --bf16-communication --zero
// (as root, OpenMPI wants --allow-run-as-root; more ranks than cores, --oversubscribe)
//
// The same global batch, seed and schedule as fashion_mnist_mlp, so it trains the
// same way on any number of ranks (up to rounding). Each rank's loader produces
// the whole global batch in the same order (same seed) and the rank reads its rows.
// Measured (host, fp32, mpirun -np 4 time-sliced on 2 cores): 89.75% test accuracy
// after 10 epochs (the one-process main job: 89.94%); bench/RESULTS.md, "Data parallel (host, MPI)".
// Extra options (--help lists them with their ranges): --bucket-bytes N,
// --no-overlap, --micro-batches N, --bf16-communication, --zero (ZeRO-1),
// --zero2 (ZeRO-2: gradients sharded too), --zero3 (ZeRO-3: parameters too),
// --powersgd R (rank-R compressed gradients with error feedback) and
// --powersgd-warmup N (steps before compression); the others are fashion_mnist_mlp's. --checkpoint names a folder here: each epoch's
// save in its own subfolder (every rank its shard, parallel/distributed_checkpoint.hpp),
// `latest` naming the newest; --resume continues from it on any number of
// ranks, with or without --zero, --zero2 or --zero3 (PowerSGD's error feedback is saved too).
#include <fusor/comm/mpi.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/parallel/data_parallel.hpp>
#if FUSOR_HAS_CUDA
#include <fusor/comm/nccl.hpp>
#endif

#include "distributed_training.hpp"

namespace {

namespace fs = fusor;
namespace nn = fusor::nn;

using mlp = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu>, nn::linear<512, 256, nn::relu>,
                           nn::linear<256, 10>>;

// The options this example adds to the Fashion-MNIST ones, declared on the same command line.
struct parallel_settings {
  fs::parallel::data_parallel_options p;
  std::optional<int> powersgd_rank;
  bool bf16_communication = false;

  void declare(fs::app::command_line& cli) {
    namespace app = fs::app;
    cli.number("--bucket-bytes", p.bucket_bytes, "gradient bucket size (a layer larger is a bucket alone)",
               app::at_least<fs::index_t>(1))
        .number("--micro-batches", p.micro_batches, "each rank's share of a batch runs in N pieces",
                app::between<fs::index_t>(1, 4096))
        .flag("--no-overlap", p.overlap, "communicate after backward instead of during it", false)
        .flag("--bf16-communication", bf16_communication, "all-reduce gradients in bf16")
        .flag("--zero", p.shard_optimizer_state, "ZeRO-1: each rank keeps 1/ranks of the optimizer state")
        .flag("--zero2", p.shard_gradients, "ZeRO-2: gradients reduce-scattered, each rank keeps its shard")
        .flag("--zero3", p.shard_parameters, "ZeRO-3: parameters sharded, gathered per layer")
        .number("--powersgd", powersgd_rank, "compress gradients with PowerSGD of rank N (error feedback)",
                app::between(1, 256))
        .number("--powersgd-warmup", p.powersgd.warmup_steps, "steps communicated uncompressed first",
                app::at_least<fs::index_t>(0));
  }
  // The options as the trainer takes them; options that exclude each other are a usage_error.
  fs::parallel::data_parallel_options resolved() const {
    if (bf16_communication && powersgd_rank)
      throw fs::app::usage_error("--bf16-communication and --powersgd exclude each other: choose one");
    fs::parallel::data_parallel_options out = p;
    if (bf16_communication) out.communication = fs::parallel::gradient_communication::bf16;
    if (powersgd_rank) {
      out.communication = fs::parallel::gradient_communication::powersgd;
      out.powersgd.rank = *powersgd_rank;
    }
    return out;
  }
};

template <class Precision, class Space, class Communicator, class Executor>
int train(const example::options& o, const fs::parallel::data_parallel_options& p, Communicator& ranks,
          const Executor& ex, const std::string& device) {
  const bool speaker = ranks.rank() == 0;
  const fs::index_t pieces = fs::index_t(ranks.size()) * p.micro_batches;
  if (o.batch % pieces != 0)
    throw fs::app::usage_error("the global batch (--batch " + std::to_string(o.batch) +
                               ") must be a multiple of ranks x micro-batches (" + std::to_string(pieces) + ")");
  const auto [train_set, test_set] = example::load_data(o);

  fs::stream_t stream{};
  if constexpr (!std::is_same_v<Executor, fs::host_executor>) stream = ex.stream;
  using network_t = nn::network<mlp, Precision, Space>;
  network_t net(o.batch / pieces, {.seed = o.seed, .stream = stream});  // each rank's micro-batch
  const fs::index_t steps_per_epoch = train_set.count / o.batch;
  fs::parallel::data_parallel<network_t, fs::optim::adamw, Communicator> trainer(
      net, ranks,
      {.schedule = fs::optim::learning_rate_schedule::warmup_cosine(o.learning_rate, steps_per_epoch / 2,
                                                                    steps_per_epoch * o.epochs),
       .stream = stream},
      fs::optim::adamw_options{.weight_decay = o.weight_decay}, p);
  trainer.initialize(ex);
  // Checkpoints: each rank its shard, saved after every epoch into a folder of saves.
  const fs::parallel::checkpoint_rank where{{.data = ranks.size()}, {.data = ranks.rank()}};
  const auto held = trainer.memory();  // this rank's share of parameters and optimizer state: its shard's bytes
  const int first_epoch =
      example::resume_distributed(o, trainer, ranks, where, ex, speaker,
                                  std::uint64_t(held.parameters + held.optimizer_state));

  fs::data::loader<Space> train_loader(train_set, example::loader_settings(o, true), stream);
  fs::data::loader<Space> test_loader(test_set, example::loader_settings(o, false), stream);

  if (speaker) {
    const auto memory = trainer.memory();
    std::printf("fusor Fashion-MNIST, data parallel: MLP 784-512-256-10 on %d ranks (%s)\n", ranks.size(), device.c_str());
    std::printf("  global batch %lld (%lld a rank x %lld micro-batches), %zu gradient buckets, overlap %s, %s communication%s\n",
                (long long)o.batch, (long long)(o.batch / pieces), (long long)p.micro_batches,
                trainer.buckets().buckets.size(), p.overlap ? "on" : "off",
                p.communication == fs::parallel::gradient_communication::bf16       ? "bf16"
                : p.communication == fs::parallel::gradient_communication::powersgd ? "PowerSGD"
                                                                                     : "native",
                p.shard_parameters  ? ", ZeRO-3"
                : p.shard_gradients ? ", ZeRO-2"
                : p.shard_optimizer_state ? ", ZeRO-1"
                                          : "");
    std::printf("  per rank: parameters %.2f MB, gradients %.2f MB, optimizer state %.2f MB, communication %.2f MB; "
                "%.2f MB into collectives a step\n",
                memory.parameters / 1e6, memory.gradients / 1e6, memory.optimizer_state / 1e6, memory.communication / 1e6,
                trainer.bytes_per_step() / 1e6);
  }
  const auto evaluate_test = [&] {
    trainer.loss().reset(ex);
    test_loader.start_epoch(0);
    while (const auto* batch = test_loader.next()) trainer.evaluate(batch->images, batch->labels, ex);
    example::wait(ex);
    return trainer.totals();  // every rank calls it: a collective
  };
  // Resumed after the last epoch: nothing to train, the saved network is measured.
  nn::loss_totals test = first_epoch < o.epochs ? nn::loss_totals{} : evaluate_test();
  for (int epoch = first_epoch; epoch < o.epochs; ++epoch) {
    trainer.loss().reset(ex);
    train_loader.start_epoch(static_cast<std::uint64_t>(epoch));
    const auto start = std::chrono::steady_clock::now();
    fs::index_t step = 0;
    while (const auto* batch = train_loader.next()) {
      trainer.step(batch->images, batch->labels, ex);
      ++step;
      if (!o.quiet && step % std::max<fs::index_t>(1, steps_per_epoch / 10) == 0) {
        example::wait(ex);
        const nn::loss_totals so_far = trainer.totals();  // every rank calls it: a collective
        if (speaker) example::progress(false, epoch + 1, o.epochs, double(step) / double(steps_per_epoch), so_far);
      }
    }
    example::wait(ex);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const nn::loss_totals trained = trainer.totals();
    test = evaluate_test();
    if (speaker) example::report_epoch(o, epoch, trained, test, seconds);
    example::save_distributed_epoch(o, trainer, ranks, where, epoch, ex);
  }
  return example::verdict(o, test, std::to_string(ranks.size()) + " ranks, " + device, speaker);
}

}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    return example::on_every_rank(world.rank(), [&] {
      parallel_settings settings;
      const std::optional<example::options> o = example::parse(
          argc, argv, {.checkpoint_folder = true}, [&](fs::app::command_line& cli) { settings.declare(cli); },
          "Trains fashion_mnist_mlp's MLP data-parallel over MPI ranks (one GPU a rank over NCCL in the _cuda build).",
          world.rank() == 0);
      if (!o) return 0;
      const fs::parallel::data_parallel_options p = settings.resolved();
#if FUSOR_HAS_CUDA
      if (o->device != "host" && fs::gpu::available()) {  // one GPU a rank, by local rank
        fs::comm::use_local_device(world);  // visible device local_rank % count, said on stderr
        cudaStream_t compute{}, communication{};
        FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
        FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&communication, cudaStreamNonBlocking));
        int status = 0;
        {
          auto gpus = fs::comm::nccl::over(world, communication);
          status = train<fs::bf16, fs::device_space>(*o, p, gpus, fs::cuda_executor{compute}, "GPUs over NCCL (bf16)");
        }
        FUSOR_CUDA_CHECK(cudaStreamDestroy(communication));
        FUSOR_CUDA_CHECK(cudaStreamDestroy(compute));
        return status;
      }
#endif
      if (o->device == "cuda")
        throw fs::app::usage_error("--device cuda, but no CUDA GPU (or no CUDA build: use the _cuda program)");
      return train<fs::fp32, fs::host_space>(*o, p, world, fs::host_executor{}, "host, fp32, MPI");
    });
  });
}
