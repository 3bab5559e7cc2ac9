// examples/fashion_mnist_training.hpp — what the Fashion-MNIST examples share:
// command-line options, the data sets and loaders, and the choice of device.
// Each single-process example only declares its network and calls
// example::main<Network>(argc, argv, name); the epoch loop is the library's
// fusor::app::fit (progress bar, validation, checkpoints, early stopping,
// the metrics CSV). The programs of several ranks write their own loops
// with the pieces below and distributed_training.hpp's.
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
  std::filesystem::path checkpoint{};  // saved after every epoch when set
  bool resume = false;          // continue from `checkpoint`
  double require_accuracy = 0;  // exit 1 when the final test accuracy is lower
  bool quiet = false;           // no progress bar (logs, tests)
  std::filesystem::path metrics{};  // a CSV line per epoch when set (scripts/plot_results.py plots it)
  int patience = 0;             // early stopping (app::fit): epochs without a lower test loss; 0: never
  bool checkpoint_folder = false;  // --checkpoint is a folder of saves (the programs of several ranks)
};

inline constexpr const char* exit_statuses =
    "exit status: 0 done; 1 the data set, the checkpoint, Inf/NaN gradients, or an accuracy below\n"
    "--require-accuracy; 2 the command line";

// The options every Fashion-MNIST example takes, declared on `cli` and bound to `o`.
void declare_options(fs::app::command_line& cli, options& o);

// Parses argv into `o` (the example's defaults). `more` declares the example's
// own options on the same command line (its --help lists them all). Empty
// when --help was given; `speaker`: whether this process prints the help (rank 0 of a job).
std::optional<options> parse(int argc, char** argv, options o,
                             const std::function<void(fs::app::command_line&)>& more = {},
                             const char* summary = "Trains on Fashion-MNIST.", bool speaker = true);

// The final line and the exit status: 1 when the accuracy is below --require-accuracy
// (what the examples' ctests check). `speaker`: whether this process prints.
int verdict(const options& o, const nn::loss_totals& test, const std::string& where, bool speaker = true);

// The training and test sets, cut to --train-limit and --test-limit; at
// least one batch (`batch`: the global batch, every rank's together) to train on.
struct data_sets {
  fs::data::labelled_images train, test;
};
data_sets load_data(const options& o, fs::index_t batch = 0);

// Batches of --batch normalised with Fashion-MNIST's pixel mean and standard
// deviation (training set): for training shuffled by --seed, the last partial
// batch dropped; for testing in order, every image.
fs::data::loader_options loader_settings(const options& o, bool training);

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
int exit_status_of(const std::exception& e);

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
