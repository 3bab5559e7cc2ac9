// examples/fashion_mnist_training.hpp — what the Fashion-MNIST examples share:
// command-line options, the data sets and loaders, and the choice of device.
// Each single-process example only declares its network and calls
// example::main<Network>(argc, argv, name); the epoch loop is the library's
// fusor::app::fit (progress bar, validation, checkpoints, early stopping,
// the metrics CSV). The programs of several ranks write their own loops
// with the pieces below.
//
// The loop: a loader with a background thread prepares shuffled batches
// (pinned memory, copies on their own stream on the GPU) while the trainer
// runs forward, loss, backward and AdamW; on the GPU the whole step is one
// replayed CUDA graph. The host reads numbers back only for the progress bar
// (ten times an epoch) and at the end of an epoch.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <fusor/app/command_line.hpp>
#include <fusor/app/fit.hpp>
#include <fusor/data/fashion_mnist.hpp>
#include <fusor/data/loader.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/optim/training_checkpoint.hpp>
#include <fusor/parallel/distributed_checkpoint.hpp>
#if FUSOR_HAS_CUDA
#include <fusor/graph/capture.hpp>
#endif

namespace example {

namespace fs = fusor;
namespace nn = fusor::nn;

struct options {
  int epochs = 10;
  fs::index_t batch = 128;
  float learning_rate = 1e-3f;
  float weight_decay = 1e-4f;
  std::uint64_t seed = 1;
  std::filesystem::path data = fs::data::fashion_mnist_default_path;
  fs::index_t train_limit = 0;  // 0: all 60000
  fs::index_t test_limit = 0;   // 0: all 10000
  std::string device = "auto";  // auto | host | cuda
  bool graph = true;            // CUDA graph of the step (GPU only)
  std::filesystem::path checkpoint;  // saved after every epoch when set
  bool resume = false;          // continue from `checkpoint`
  double require_accuracy = 0;  // exit 1 when the final test accuracy is lower
  bool quiet = false;           // no progress bar (logs, tests)
  std::filesystem::path metrics;  // a CSV line per epoch when set (scripts/plot_results.py plots it)
  int patience = 0;             // early stopping (app::fit): epochs without a lower test loss; 0: never
};

inline constexpr const char* exit_statuses =
    "exit status: 0 done; 1 the data set, the checkpoint, Inf/NaN gradients, or an accuracy below\n"
    "--require-accuracy; 2 the command line";

// The options every Fashion-MNIST example takes, declared on `cli` and bound to `o`.
inline void declare_options(fs::app::command_line& cli, options& o) {
  namespace app = fs::app;
  cli.number("--epochs", o.epochs, "epochs", app::between(1, 100000))
      .number("--batch", o.batch, "batch size", app::between<fs::index_t>(1, 60000))
      .number("--lr", o.learning_rate, "peak learning rate of AdamW, warmup + cosine schedule", app::above_up_to(0.f, 10.f))
      .number("--seed", o.seed, "weights, data order and dropout")
      .path("--data", o.data, "Fashion-MNIST folder (Debian: apt-get install dataset-fashion-mnist)", "DIR")
      .number("--train-limit", o.train_limit, "use only the first N training images (0: all)",
              app::between<fs::index_t>(0, 60000))
      .number("--test-limit", o.test_limit, "use only the first N test images (0: all)", app::between<fs::index_t>(0, 10000))
      .choice("--device", o.device, {"auto", "host", "cuda"},
              "auto: the GPU when there is one; cuda without a GPU: \"skipped: no GPU\", exit status 77")
      .flag("--no-graph", o.graph, "run the GPU step eagerly instead of replaying a CUDA graph", false)
      .path("--checkpoint", o.checkpoint, "save parameters and optimizer state there after every epoch (safetensors)")
      .flag("--resume", o.resume, "continue from --checkpoint")
      .number("--require-accuracy", o.require_accuracy, "exit with status 1 when the final test accuracy is below X",
              app::between(0.0, 1.0))
      .flag("--quiet", o.quiet, "no progress bar")
      .path("--metrics", o.metrics, "write each epoch's losses and accuracies to this CSV file (--resume continues it)");
}

// Parses argv into `o` (the example's defaults). `more` declares the example's
// own options on the same command line (its --help lists them all). Empty
// when --help was given; `speaker`: whether this process prints the help (rank 0 of a job).
inline std::optional<options> parse(int argc, char** argv, options o,
                                    const std::function<void(fs::app::command_line&)>& more = {},
                                    const char* summary = "Trains on Fashion-MNIST.", bool speaker = true) {
  fs::app::command_line cli(summary);
  cli.print_help(speaker);
  declare_options(cli, o);
  if (more) more(cli);
  cli.epilogue(exit_statuses);
  if (!cli.parse(argc, argv)) return std::nullopt;
  if (o.resume && o.checkpoint.empty()) throw fs::app::usage_error("--resume needs --checkpoint");
  if (!o.metrics.empty() && speaker) {  // an unwritable path fails before any work
    try {
      fs::app::start_metrics_csv(o.metrics, o.resume);
    } catch (const std::exception& e) {
      throw std::runtime_error("--metrics '" + o.metrics.string() + "': cannot write there (" + e.what() + ")");
    }
  }
  return o;
}

// The progress bar of the programs of several ranks (fit prints its own).
inline void progress(bool quiet, int epoch, int epochs, double fraction, const nn::loss_totals& t) {
  if (!quiet) fs::app::print_progress(epoch, epochs, fraction, t);
}

// An epoch's summary line, as fit prints it, and its --metrics line (programs of several ranks).
inline void report_epoch(const options& o, int epoch, const nn::loss_totals& trained, const nn::loss_totals& test,
                         double seconds) {
  const fs::app::epoch_result e{.epoch = epoch + 1, .train = trained, .validation = test, .seconds = seconds,
                                .samples_per_second = double(trained.samples) / seconds};
  fs::app::print_epoch_summary(e, o.epochs, "test", !o.quiet);
  if (!o.metrics.empty()) fs::app::append_metrics_csv(o.metrics, e);
}

// The final line and the exit status: 1 when the accuracy is below --require-accuracy
// (what the examples' ctests check). `speaker`: whether this process prints.
inline int verdict(const options& o, const nn::loss_totals& test, const std::string& where, bool speaker = true) {
  if (speaker) std::printf("final test accuracy %.2f%% (%s)\n", 100 * test.accuracy, where.c_str());
  if (test.accuracy >= o.require_accuracy) return 0;
  if (speaker) std::printf("below the required %.2f%%\n", 100 * o.require_accuracy);
  return 1;
}

// The training and test sets, cut to --train-limit and --test-limit; at
// least one batch (`batch`: the global batch, every rank's together) to train on.
struct data_sets {
  fs::data::labelled_images train, test;
};
inline data_sets load_data(const options& o, fs::index_t batch = 0) {
  data_sets d{fs::data::load_fashion_mnist(fs::data::split::train, o.data),
              fs::data::load_fashion_mnist(fs::data::split::test, o.data)};
  if (o.train_limit > 0) d.train = fs::data::take_first(d.train, std::min(o.train_limit, d.train.count));
  if (o.test_limit > 0) d.test = fs::data::take_first(d.test, std::min(o.test_limit, d.test.count));
  if (d.train.count < std::max(batch, o.batch))
    throw fs::app::usage_error("the training set (" + std::to_string(d.train.count) + " images) is smaller than one batch (" +
                               std::to_string(std::max(batch, o.batch)) + "): lower --batch or raise --train-limit");
  return d;
}

// Batches of --batch normalised with Fashion-MNIST's pixel mean and standard
// deviation (training set): for training shuffled by --seed, the last partial
// batch dropped; for testing in order, every image.
inline fs::data::loader_options loader_settings(const options& o, bool training) {
  fs::data::loader_options l{.batch_size = o.batch, .seed = o.seed, .prefetch = 3, .mean = 0.2860f, .std = 0.3530f};
  l.drop_last = training;
  l.shuffle = training;
  return l;
}

}  // namespace example

namespace example {

inline void wait([[maybe_unused]] const fs::host_executor& ex) {}
#if FUSOR_HAS_CUDA
inline void wait(const fs::cuda_executor& ex) { ex.synchronize(); }
#endif

// Checkpoints of the programs that train over several ranks: --checkpoint is
// a folder of saves (parallel/distributed_checkpoint.hpp), each epoch's in its
// own subfolder, every rank writing its shard; `latest` names the newest.
// --resume continues from it on any number of ranks and any split.
//
// The epoch to start from: 0, or the one after the latest save (loaded into `trainer`).
//
// Before anything is loaded, the folder is proven writable for this rank's
// shard of about `shard_bytes` (io::check_destination): a save that cannot
// work fails now, not after the first epoch.
template <class Trainer, class Executor>
int resume_distributed(const options& o, Trainer& trainer, const fs::parallel::checkpoint_rank& where,
                       const Executor& ex, bool speaker, std::uint64_t shard_bytes) {
  if (!o.checkpoint.empty()) fs::io::check_destination(o.checkpoint, fs::io::destination_kind::folder, shard_bytes);
  if (!o.resume) return 0;
  const auto last = fs::parallel::latest_distributed_save(o.checkpoint);
  if (!last) {
    if (speaker) std::printf("no finished save in %s yet: starting afresh\n", o.checkpoint.c_str());
    return 0;
  }
  const auto metadata = fs::parallel::load_distributed(*last, trainer, where, ex);
  const int epoch = fs::app::saved_epoch(metadata, *last, o.epochs);
  if (speaker)
    std::printf("resumed from %s after epoch %d (saved by a %s data x tensor x pipeline mesh)\n", last->c_str(), epoch,
                metadata.at("training.mesh").c_str());
  return epoch;
}
// After epoch `epoch` (counted from 0), when --checkpoint is set: a collective over `world`.
template <class Trainer, class Communicator, class Executor>
void save_distributed_epoch(const options& o, Trainer& trainer, Communicator& world,
                            const fs::parallel::checkpoint_rank& where, int epoch, const Executor& ex) {
  if (o.checkpoint.empty()) return;
  const std::string done = std::to_string(epoch + 1);
  fs::parallel::save_distributed_latest(o.checkpoint, trainer, world, where, "epoch-" + done, {{"epoch", done}}, ex);
}

// Trains and evaluates Sequential on Fashion-MNIST with app::fit; returns the exit status.
template <class Sequential, class Precision, class Space, class Executor>
int train(const options& o, const Executor& ex, const std::string& device, const char* network_name) {
  const data_sets sets = load_data(o);  // not a structured binding: the banner's lambda uses it (clang 14)
  const fs::data::labelled_images& train_set = sets.train;
  const fs::data::labelled_images& test_set = sets.test;

  fs::stream_t stream{};
  if constexpr (!std::is_same_v<Executor, fs::host_executor>) stream = ex.stream;
  using network_t = nn::network<Sequential, Precision, Space>;
  network_t net(o.batch, {.seed = o.seed, .stream = stream});
  const fs::index_t steps_per_epoch = train_set.count / o.batch;  // the last partial batch is dropped
  const fs::index_t total_steps = steps_per_epoch * o.epochs;
  fs::optim::trainer<network_t, fs::optim::adamw> trainer(
      net,
      {.schedule = fs::optim::learning_rate_schedule::warmup_cosine(o.learning_rate, steps_per_epoch / 2, total_steps),
       .stream = stream},
      fs::optim::adamw_options{.weight_decay = o.weight_decay});
  trainer.initialize(ex);

  fs::data::loader<Space> train_loader(train_set, loader_settings(o, true), stream);
  fs::data::loader<Space> test_loader(test_set, loader_settings(o, false), stream);

  const auto banner = [&](int) {  // once fit has checked the checkpoint: a mistake there shows before it
    std::printf("fusor Fashion-MNIST: %s, %lld parameters, on %s\n", network_name, (long long)net.parameter_count(),
                device.c_str());
    std::printf("  %lld training / %lld test images, batch %lld, AdamW lr %g (warmup + cosine), %d epochs%s\n",
                (long long)train_set.count, (long long)test_set.count, (long long)o.batch, o.learning_rate, o.epochs,
                std::is_same_v<Space, fs::device_space> && o.graph ? ", CUDA graph" : "");
  };
  const fs::app::fit_result r = fs::app::fit(trainer, train_loader, test_loader, ex,
                                             {.epochs = o.epochs,
                                              .graph = o.graph,
                                              .checkpoint = o.checkpoint,
                                              .resume = o.resume,
                                              .patience = o.patience,
                                              .metrics = o.metrics,
                                              .progress = !o.quiet},
                                             {.on_start = banner, .on_epoch = {}});
  return verdict(o, r.validation, device);
}

// 2 for the command line (an option, or options that do not fit together or
// with the data); 1 for everything else: the data set (missing, truncated,
// corrupt), a checkpoint (cannot be written or read), Inf/NaN gradients, the GPU.
inline int exit_status_of(const std::exception& e) {
  return dynamic_cast<const fs::app::usage_error*>(&e) != nullptr ? 2 : 1;
}

// The programs of several ranks (mpirun): runs `body` and turns a usage_error
// into exit status 2, said once by rank 0 (every rank meets it alike: it comes
// from the arguments and the data set, which all ranks read); any other error
// goes on to comm::run_ranks, which reports it and ends the job with status 1.
template <class Body>
int on_every_rank(int rank, Body&& body) {
  try {
    return body();
  } catch (const fs::app::usage_error& e) {
    if (rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}

// Parses the options, picks the device and runs: GPU (bf16 with fp32 master
// weights) when one is present and the program was built by nvcc, else the host (fp32).
template <class Sequential>
int main(int argc, char** argv, const char* network_name, options defaults = {}) {
  try {
    int patience = 0;  // only the programs that train with app::fit stop early
    std::optional<options> o = parse(
        argc, argv, defaults,
        [&](fs::app::command_line& cli) {
          cli.number("--patience", patience, "stop after N epochs without a lower test loss (0: never)",
                     fs::app::between(0, 100000));
        },
        ("Trains the " + std::string(network_name) + " on Fashion-MNIST.").c_str());
    if (!o) return 0;
    o->patience = patience;
#if FUSOR_HAS_CUDA
    if (o->device != "host" && fs::gpu::available()) {
      cudaStream_t stream{};
      FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cudaDeviceProp properties{};
      FUSOR_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
      const int status = train<Sequential, fs::bf16, fs::device_space>(*o, fs::cuda_executor{stream},
                                                                        std::string("GPU ") + properties.name + " (bf16)", network_name);
      FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
      return status;
    }
    if (o->device == "cuda") {  // 77: ctest's "skipped" (the _cuda example tests ask for the GPU)
      std::printf("skipped: no GPU (--device cuda, but no CUDA GPU is available)\n");
      return 77;
    }
#else
    if (o->device == "cuda")
      throw fs::app::usage_error("--device cuda, but this program was built without CUDA (use the _cuda build)");
#endif
    return train<Sequential, fs::fp32, fs::host_space>(*o, fs::host_executor{}, "the host (fp32, OpenMP + OpenBLAS)",
                                                       network_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return exit_status_of(e);
  }
}

}  // namespace example
