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
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fusor/comm/mpi.hpp>
#include <fusor/data/fashion_mnist.hpp>
#include <fusor/data/loader.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/parallel/pipeline.hpp>
#if FUSOR_HAS_CUDA
#include <fusor/comm/nccl.hpp>
#endif

namespace fs = fusor;
namespace nn = fusor::nn;
namespace parallel = fusor::parallel;

// 784-512-256-256-128-10: five layers, so four stages get at least one each.
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu>, nn::linear<512, 256, nn::relu>,
                           nn::linear<256, 256, nn::relu>, nn::linear<256, 128, nn::relu>, nn::linear<128, 10>>;

namespace {

struct options {
  int epochs = 3;
  fs::index_t batch = 128;
  parallel::pipeline_options pipeline = {};
  float learning_rate = 1e-3f;
  float weight_decay = 1e-4f;
  std::uint64_t seed = 1;
  std::filesystem::path data = fs::data::fashion_mnist_default_path;
  fs::index_t train_limit = 0, test_limit = 0;  // 0: all
  std::string device = "auto";                  // auto | host | cuda
  double require_accuracy = 0;                  // exit 1 below it
  bool quiet = false;                           // no per-epoch idle lines
};

const char* usage =
    "usage: [mpirun -np STAGES] pipeline_mlp [options]\n"
    "  --schedule S         1f1b (default) or gpipe\n"
    "  --micro-batches M    micro-batches per batch (default 4; must divide the batch)\n"
    "  --stage-map A,B,...  first layer of each stage (default: layers split evenly over the ranks)\n"
    "  --epochs N           (default 3)    --batch N   global batch (default 128)\n"
    "  --lr X               peak AdamW learning rate, warmup + cosine (default 1e-3)\n"
    "  --seed N             weights and data order (default 1)\n"
    "  --data DIR           Fashion-MNIST directory (Debian: apt-get install dataset-fashion-mnist)\n"
    "  --train-limit N      only the first N training images;  --test-limit N  likewise\n"
    "  --device D           auto | host | cuda (auto: the GPUs when built by nvcc and present)\n"
    "  --require-accuracy X exit with status 1 when the final test accuracy is below X\n"
    "  --quiet              only the final lines\n";

std::optional<options> parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw fs::error("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--schedule") {
      const std::string s = value();
      if (s != "1f1b" && s != "gpipe") throw fs::error("--schedule is 1f1b or gpipe, not " + s);
      o.pipeline.schedule = s == "gpipe" ? parallel::pipeline_schedule::gpipe
                                         : parallel::pipeline_schedule::one_forward_one_backward;
    } else if (a == "--micro-batches") o.pipeline.micro_batches = std::stoll(value());
    else if (a == "--stage-map") {
      std::stringstream list(value());
      for (std::string start; std::getline(list, start, ',');) o.pipeline.stage_starts.push_back(std::stoul(start));
    } else if (a == "--epochs") o.epochs = std::stoi(value());
    else if (a == "--batch") o.batch = std::stoll(value());
    else if (a == "--lr") o.learning_rate = std::stof(value());
    else if (a == "--seed") o.seed = std::stoull(value());
    else if (a == "--data") o.data = value();
    else if (a == "--train-limit") o.train_limit = std::stoll(value());
    else if (a == "--test-limit") o.test_limit = std::stoll(value());
    else if (a == "--device") o.device = value();
    else if (a == "--require-accuracy") o.require_accuracy = std::stod(value());
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--help" || a == "-h") return std::nullopt;
    else throw fs::error("unknown option " + a + " (--help lists them)");
  }
  if (o.device != "auto" && o.device != "host" && o.device != "cuda")
    throw fs::error("--device is auto, host or cuda, not " + o.device);
  return o;
}

void wait([[maybe_unused]] const fs::host_executor& ex) {}
#if FUSOR_HAS_CUDA
void wait(const fs::cuda_executor& ex) { ex.synchronize(); }
#endif

// Trains with `stages` (the communicator the messages travel on); `world` (MPI)
// gathers each rank's idle time for rank 0 to print.
template <class Precision, class Space, class Communicator, class Executor>
int train(const options& o, fs::comm::mpi& world, Communicator& stages, const Executor& ex, fs::stream_t stream,
          const std::string& device) {
  fs::data::labelled_images train_set = fs::data::load_fashion_mnist(fs::data::split::train, o.data);
  fs::data::labelled_images test_set = fs::data::load_fashion_mnist(fs::data::split::test, o.data);
  if (o.train_limit > 0) train_set = fs::data::take_first(train_set, std::min(o.train_limit, train_set.count));
  if (o.test_limit > 0) test_set = fs::data::take_first(test_set, std::min(o.test_limit, test_set.count));
  const fs::index_t steps_per_epoch = train_set.count / o.batch;  // the last partial batch is dropped
  if (steps_per_epoch < 1) throw fs::error("the training set is smaller than one batch");

  parallel::pipeline<mlp, Precision, Space, fs::optim::adamw, Communicator> pipe(
      stages, o.batch, {.seed = o.seed, .stream = stream},
      {.schedule = fs::optim::learning_rate_schedule::warmup_cosine(o.learning_rate, steps_per_epoch / 2,
                                                                    steps_per_epoch * o.epochs),
       .stream = stream},
      fs::optim::adamw_options{.weight_decay = o.weight_decay}, o.pipeline);
  pipe.initialize(ex);

  const fs::data::loader_options common{.batch_size = o.batch, .seed = o.seed, .prefetch = 3, .mean = 0.2860f, .std = 0.3530f};
  fs::data::loader_options train_options = common, test_options = common;
  train_options.drop_last = true;
  test_options.shuffle = false;
  fs::data::loader<Space> train_loader(train_set, train_options, stream);
  fs::data::loader<Space> test_loader(test_set, test_options, stream);

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

  nn::loss_totals test{};
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
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
    wait(ex);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const nn::loss_totals trained = pipe.totals();

    pipe.reset_totals(ex);
    test_loader.start_epoch(0);
    while (const auto* batch = test_loader.next()) pipe.evaluate(batch->images, batch->labels, ex);
    test = pipe.totals();
    gather(step_seconds > 0 ? idle_seconds / step_seconds : 0.0, seconds);
    if (world.rank() == 0) {
      std::printf("epoch %d/%d  train loss %.4f  test loss %.4f  test accuracy %.2f%%  %.0f samples/s  (%.1f s)\n",
                  epoch + 1, o.epochs, trained.mean_loss, test.mean_loss, 100 * test.accuracy,
                  double(trained.samples) / seconds, seconds);
      if (!o.quiet || epoch + 1 == o.epochs) {
        std::printf("  idle (waiting for a neighbour) per stage:");
        for (int r = 0; r < world.size(); ++r) std::printf(" %.1f%%", 100 * gathered[std::size_t(2 * r)]);
        std::printf("  vs bubble (p-1)/(m+p-1) = %.1f%% of a step, (p-1)/m = %.3f\n", 100 * shape.bubble_share_of_step,
                    shape.bubble_fraction);
      }
      std::fflush(stdout);
    }
  }
  if (world.rank() == 0) std::printf("final test accuracy %.2f%% (%s)\n", 100 * test.accuracy, device.c_str());
  if (test.accuracy < o.require_accuracy) {
    if (world.rank() == 0) std::printf("below the required %.2f%%\n", 100 * o.require_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    const std::optional<options> o = parse(argc, argv);
    if (!o) {
      if (world.rank() == 0) std::printf("%s", usage);
      return 0;
    }
#if FUSOR_HAS_CUDA
    if (o->device != "host" && fs::cuda::available()) {
      // One GPU per rank (by local rank); NCCL carries the stages' messages.
      FUSOR_CUDA_CHECK(cudaSetDevice(world.local_rank()));
      cudaStream_t stream{};
      FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      int status = 0;
      {
        auto gpus = fs::comm::nccl::over(world, stream);
        status = train<fs::bf16, fs::device_space>(*o, world, gpus, fs::cuda_executor{stream}, stream,
                                                  "GPUs (NCCL, bf16)");
      }
      FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
      return status;
    }
    if (o->device == "cuda") throw fs::error("--device cuda, but no CUDA GPU is available");
#else
    if (o->device == "cuda") throw fs::error("--device cuda, but this program was built without CUDA (use the _cuda build)");
#endif
    return train<fs::fp32, fs::host_space>(*o, world, world, fs::host_executor{}, fs::stream_t{},
                                           "CPUs (MPI, fp32)");
  });
}
