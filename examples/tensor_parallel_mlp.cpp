// examples/tensor_parallel_mlp.cpp — the main job's MLP (fashion_mnist_mlp)
// trained tensor-parallel: its 512-wide hidden layer is split across the ranks
// (Megatron's scheme). The first layer is column-parallel (each rank computes
// 512 / N of the hidden features), the second row-parallel (each rank
// multiplies its slice; the partial results are summed over the ranks), the
// classifier is whole on every rank. Every rank trains on the same batches;
// each step sums activations once in forward and gradients once in backward.
// Rank 0 prints.
//
//   mpirun -np 2 build/examples/tensor_parallel_mlp                # CPUs, MPI (1, 2, 4 or 8 ranks)
//   mpirun -np 4 build/examples/tensor_parallel_mlp_cuda           # one GPU a rank, NCCL
// (as root, OpenMPI wants --allow-run-as-root; more ranks than cores, --oversubscribe)
//
// The same seed gives every rank its slices of the very parameters
// fashion_mnist_mlp starts from, so it trains the same way on any number of
// ranks (up to rounding). The degree is compiled in (activations have static
// shapes): the program is built for 1, 2, 4 and 8 and picks the communicator's size.
// --checkpoint names a folder of saves (every rank its slices; see
// fashion_mnist_training.hpp): --resume continues on any number of ranks, and
// fashion_mnist_data_parallel resumes the same saves (the layers are the same).
#include <fusor/comm/mpi.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/parallel/tensor_parallel.hpp>
#if FUSOR_HAS_CUDA
#include <fusor/comm/nccl.hpp>
#endif

#include "distributed_training.hpp"

namespace {

namespace fs = fusor;
namespace nn = fusor::nn;

template <int Ways>
using mlp = nn::sequential<nn::features<784>,
                           nn::linear<784, 512, nn::relu, nn::parallel<nn::column_parallel<Ways>>>,  // 512 / Ways here
                           nn::linear<512, 256, nn::relu, nn::parallel<nn::row_parallel<Ways>>>,     // summed: all 256
                           nn::linear<256, 10>>;                                                     // whole on every rank

template <int Ways, class Precision, class Space, class Communicator, class Executor>
int train(const example::options& o, Communicator& ranks, const Executor& ex, const std::string& device) {
  const bool speaker = ranks.rank() == 0;
  const auto [train_set, test_set] = example::load_data(o);  // at least one batch, or a usage error

  fs::stream_t stream{};
  if constexpr (!std::is_same_v<Executor, fs::host_executor>) stream = ex.stream;
  using network_t = nn::network<mlp<Ways>, Precision, Space>;
  network_t net(o.batch, {.seed = o.seed, .stream = stream});
  fs::parallel::tensor_parallel tp(net, ranks);  // connects the split layers; this rank's slices of the parameters
  const fs::index_t steps_per_epoch = train_set.count / o.batch;
  fs::optim::trainer<network_t, fs::optim::adamw> trainer(
      net,
      {.schedule = fs::optim::learning_rate_schedule::warmup_cosine(o.learning_rate, steps_per_epoch / 2,
                                                                    steps_per_epoch * o.epochs),
       .stream = stream},
      fs::optim::adamw_options{.weight_decay = o.weight_decay});
  trainer.reduce_gradient_norm_with(tp);  // the global gradient norm: every rank clips and skips alike
  trainer.initialize(ex);
  const fs::parallel::checkpoint_rank where{{.tensor = Ways}, {.tensor = ranks.rank()}};
  const int first_epoch =
      example::resume_distributed(o, trainer, ranks, where, ex, speaker, fs::optim::training_state_bytes(trainer));

  // Every rank reads the same batches (same seed): tensor parallelism splits the model, not the data.
  const fs::data::loader_options common{.batch_size = o.batch, .seed = o.seed, .prefetch = 3, .mean = 0.2860f, .std = 0.3530f};
  fs::data::loader_options train_options = common, test_options = common;
  train_options.drop_last = true;
  test_options.shuffle = false;
  fs::data::loader<Space> train_loader(train_set, train_options, stream);
  fs::data::loader<Space> test_loader(test_set, test_options, stream);

  if (speaker) {
    std::printf("fusor Fashion-MNIST, tensor parallel: MLP 784-512-256-10 split %d ways (%s)\n", Ways, device.c_str());
    std::printf("  %lld parameters a rank (%zu layers split); %lld training / %lld test images, batch %lld, AdamW lr %g, "
                "%d epochs\n",
                (long long)net.parameter_count(), tp.split_layers(), (long long)train_set.count,
                (long long)test_set.count, (long long)o.batch, o.learning_rate, o.epochs);
  }
  const auto evaluate_test = [&] {
    trainer.loss().reset(ex);
    test_loader.start_epoch(0);
    while (const auto* batch = test_loader.next()) trainer.evaluate(batch->images, batch->labels, ex);
    return trainer.loss().totals();
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
      if (speaker && !o.quiet && step % std::max<fs::index_t>(1, steps_per_epoch / 10) == 0)
        example::progress(false, epoch + 1, o.epochs, double(step) / double(steps_per_epoch), trainer.loss().totals());
    }
    example::wait(ex);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The logits are whole on every rank, so every rank's loss and accuracy are the same.
    const nn::loss_totals trained = trainer.loss().totals();
    test = evaluate_test();
    if (speaker) example::report_epoch(o, epoch, trained, test, seconds);
    example::save_distributed_epoch(o, trainer, ranks, where, epoch, ex);
  }
  return example::verdict(o, test, std::to_string(Ways) + " ways, " + device, speaker);
}

}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    return example::on_every_rank(world.rank(), [&] {
      const std::optional<example::options> o = example::parse(
          argc, argv, {.checkpoint_folder = true}, {},
          "Trains fashion_mnist_mlp's MLP with its hidden layer split over 1, 2, 4 or 8 MPI ranks (GPUs over NCCL in the "
          "_cuda build).",
          world.rank() == 0);
      if (!o) return 0;
      // The degree compiled for the number of ranks; 512 is the width the two split layers divide.
      return fs::parallel::dispatch_tensor_parallel<1, 2, 4, 8>(world.size(), {512}, [&]<int Ways>() {
#if FUSOR_HAS_CUDA
        if (o->device != "host" && fs::gpu::available()) {  // one GPU a rank, by local rank
          fs::comm::use_local_device(world);  // visible device local_rank % count, said on stderr
          cudaStream_t stream{};
          FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
          int status = 0;
          {
            // NCCL on the compute stream: the all-reduces queue behind the matmuls, nothing waits.
            auto gpus = fs::comm::nccl::over(world, stream);
            status = train<Ways, fs::bf16, fs::device_space>(*o, gpus, fs::cuda_executor{stream}, "GPUs over NCCL, bf16");
          }
          FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
          return status;
        }
#endif
        if (o->device == "cuda")
          throw fs::app::usage_error("--device cuda, but no CUDA GPU (or no CUDA build: use the _cuda program)");
        return train<Ways, fs::fp32, fs::host_space>(*o, world, fs::host_executor{}, "host, fp32, MPI");
      });
    });
  });
}
