// examples/fashion_mnist_training.hpp — what the Fashion-MNIST examples share:
// command-line options, the epoch loop with its progress bar, evaluation,
// checkpoints, and the choice of device. Each example only declares its
// network and calls run_fashion_mnist<Network>(argc, argv, ...).
//
// The loop: a loader with a background thread prepares shuffled batches
// (pinned memory, copies on their own stream on the GPU) while the trainer
// runs forward, loss, backward and AdamW; on the GPU the whole step is one
// replayed CUDA graph. The host reads numbers back only for the progress bar
// (ten times an epoch) and at the end of an epoch.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

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

// The epoch a checkpoint was saved after (its "epoch" metadata), or an error naming the file and the key.
inline int saved_epoch(const std::map<std::string, std::string>& metadata, const std::filesystem::path& file,
                       int epochs) {
  const auto it = metadata.find("epoch");
  if (it == metadata.end())
    throw fs::io::checkpoint_error("checkpoint '" + file.string() + "' has no 'epoch' in its metadata: it was not "
                                   "saved by this program");
  int epoch = -1;
  const std::string& text = it->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), epoch);
  if (error != std::errc{} || end != text.data() + text.size() || epoch < 0)
    throw fs::io::checkpoint_error("checkpoint '" + file.string() + "': metadata 'epoch' is '" + text +
                                   "', not a whole number of epochs");
  if (epoch > epochs)
    throw fs::error("checkpoint '" + file.string() + "' was saved after epoch " + text + ", beyond --epochs " +
                    std::to_string(epochs) + ": ask for more epochs to continue it");
  return epoch;
}

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
  std::string checkpoint;       // saved after every epoch when set
  bool resume = false;          // continue from `checkpoint`
  double require_accuracy = 0;  // exit 1 when the final test accuracy is lower
  bool quiet = false;           // no progress bar (logs, tests)
};

inline void usage(const char* program, const options& o) {
  std::printf(
      "usage: %s [options]\n"
      "  --epochs N           epochs (default %d)\n"
      "  --batch N            batch size (default %lld)\n"
      "  --lr X               peak learning rate of AdamW, cosine schedule (default %g)\n"
      "  --seed N             weights, data order and dropout (default %llu)\n"
      "  --data DIR           Fashion-MNIST directory (default %s; Debian: apt-get install dataset-fashion-mnist)\n"
      "  --train-limit N      use only the first N training images (0: all)\n"
      "  --test-limit N       use only the first N test images (0: all)\n"
      "  --device D           auto | host | cuda (default auto: the GPU when there is one;\n"
      "                       cuda without a GPU: \"skipped: no GPU\", exit status 77)\n"
      "  --no-graph           run the GPU step eagerly instead of replaying a CUDA graph\n"
      "  --checkpoint FILE    save parameters and optimizer state there after every epoch (safetensors)\n"
      "  --resume             continue from --checkpoint\n"
      "  --require-accuracy X exit with status 1 when the final test accuracy is below X\n"
      "  --quiet              no progress bar\n"
      "exit status: 0 done; 1 the data set, the checkpoint, Inf/NaN gradients, or an accuracy below\n"
      "--require-accuracy; 2 the command line\n",
      program, o.epochs, (long long)o.batch, o.learning_rate, (unsigned long long)o.seed, o.data.c_str());
}

inline std::optional<options> parse(int argc, char** argv, options o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw fs::error("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--epochs") o.epochs = std::stoi(value());
    else if (a == "--batch") o.batch = std::stoll(value());
    else if (a == "--lr") o.learning_rate = std::stof(value());
    else if (a == "--seed") o.seed = std::stoull(value());
    else if (a == "--data") o.data = value();
    else if (a == "--train-limit") o.train_limit = std::stoll(value());
    else if (a == "--test-limit") o.test_limit = std::stoll(value());
    else if (a == "--device") o.device = value();
    else if (a == "--no-graph") o.graph = false;
    else if (a == "--checkpoint") o.checkpoint = value();
    else if (a == "--resume") o.resume = true;
    else if (a == "--require-accuracy") o.require_accuracy = std::stod(value());
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--help" || a == "-h") return usage(argv[0], o), std::nullopt;
    else throw fs::error("unknown option " + a + " (--help lists them)");
  }
  if (o.device != "auto" && o.device != "host" && o.device != "cuda")
    throw fs::error("--device is auto, host or cuda, not " + o.device);
  if (o.resume && o.checkpoint.empty()) throw fs::error("--resume needs --checkpoint FILE");
  return o;
}

// "epoch 3/10 [##########..........]  50%  loss 0.4123  acc 85.2%"
inline void progress(bool quiet, int epoch, int epochs, double fraction, const nn::loss_totals& t) {
  if (quiet) return;
  const int width = 30, filled = static_cast<int>(fraction * width + 0.5);
  std::printf("\repoch %d/%d [%.*s%.*s] %3.0f%%  loss %.4f  acc %5.1f%%", epoch, epochs, filled,
              "##############################", width - filled, "..............................", 100 * fraction,
              t.mean_loss, 100 * t.accuracy);
  std::fflush(stdout);
}

// An epoch's summary line, as every example prints it.
inline void report_epoch(const options& o, int epoch, const nn::loss_totals& trained, const nn::loss_totals& test,
                         double seconds) {
  std::printf("%sepoch %d/%d  train loss %.4f  test loss %.4f  test accuracy %.2f%%  %.0f samples/s  (%.1f s)\n",
              o.quiet ? "" : "\n", epoch + 1, o.epochs, trained.mean_loss, test.mean_loss, 100 * test.accuracy,
              double(trained.samples) / seconds, seconds);
  std::fflush(stdout);
}

// The final line and the exit status: 1 when the accuracy is below --require-accuracy
// (what the examples' ctests check). `speaker`: whether this process prints.
inline int verdict(const options& o, const nn::loss_totals& test, const std::string& where, bool speaker = true) {
  if (speaker) std::printf("final test accuracy %.2f%% (%s)\n", 100 * test.accuracy, where.c_str());
  if (test.accuracy >= o.require_accuracy) return 0;
  if (speaker) std::printf("below the required %.2f%%\n", 100 * o.require_accuracy);
  return 1;
}

// The training and test sets, cut to --train-limit and --test-limit.
struct data_sets {
  fs::data::labelled_images train, test;
};
inline data_sets load_data(const options& o) {
  data_sets d{fs::data::load_fashion_mnist(fs::data::split::train, o.data),
              fs::data::load_fashion_mnist(fs::data::split::test, o.data)};
  if (o.train_limit > 0) d.train = fs::data::take_first(d.train, std::min(o.train_limit, d.train.count));
  if (o.test_limit > 0) d.test = fs::data::take_first(d.test, std::min(o.test_limit, d.test.count));
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
template <class Trainer, class Executor>
int resume_distributed(const options& o, Trainer& trainer, const fs::parallel::checkpoint_rank& where,
                       const Executor& ex, bool speaker) {
  if (!o.checkpoint.empty() && std::filesystem::exists(o.checkpoint) && !std::filesystem::is_directory(o.checkpoint))
    throw fs::error("--checkpoint " + o.checkpoint + " is a file; this program saves into a folder (each rank its shard)");
  if (!o.resume) return 0;
  const auto last = fs::parallel::latest_distributed_save(o.checkpoint);
  if (!last) {
    if (speaker) std::printf("no finished save in %s yet: starting afresh\n", o.checkpoint.c_str());
    return 0;
  }
  const auto metadata = fs::parallel::load_distributed(*last, trainer, where, ex);
  const int epoch = saved_epoch(metadata, *last, o.epochs);
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

// Trains and evaluates Sequential on Fashion-MNIST; returns the exit status.
template <class Sequential, class Precision, class Space, class Executor>
int train(const options& o, const Executor& ex, const std::string& device, const char* network_name) {
  const auto [train_set, test_set] = load_data(o);
  if (train_set.count < o.batch)
    throw fs::error("the training set (" + std::to_string(train_set.count) + " images) is smaller than one batch (" +
                    std::to_string(o.batch) + ")");

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

  int first_epoch = 0;
  if (o.resume && std::filesystem::exists(o.checkpoint)) {
    const auto metadata = fs::optim::load_training_state(o.checkpoint, trainer);
    first_epoch = saved_epoch(metadata, o.checkpoint, o.epochs);
    std::printf("resumed from %s after epoch %d\n", o.checkpoint.c_str(), first_epoch);
  }

  std::printf("fusor Fashion-MNIST: %s, %lld parameters, on %s\n", network_name, (long long)net.parameter_count(),
              device.c_str());
  std::printf("  %lld training / %lld test images, batch %lld, AdamW lr %g (warmup + cosine), %d epochs%s\n",
              (long long)train_set.count, (long long)test_set.count, (long long)o.batch, o.learning_rate, o.epochs,
              std::is_same_v<Space, fs::device_space> && o.graph ? ", CUDA graph" : "");

#if FUSOR_HAS_CUDA
  // Fixed buffers the captured step reads; each batch is copied into them.
  using image_tensor = fs::tensor<float, fs::dextents<fs::index_t, 2>, fs::row_major, Space>;
  using label_tensor = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 1>, fs::row_major, Space>;
  image_tensor graph_images;
  label_tensor graph_labels;
  fs::graph::captured_step captured;
#endif

  nn::loss_totals test{};
  for (int epoch = first_epoch; epoch < o.epochs; ++epoch) {
    trainer.loss().reset(ex);
    train_loader.start_epoch(static_cast<std::uint64_t>(epoch));
    const auto start = std::chrono::steady_clock::now();
    fs::index_t step = 0;
    while (const auto* batch = train_loader.next()) {
      bool done = false;
#if FUSOR_HAS_CUDA
      if constexpr (std::is_same_v<Space, fs::device_space>) {
        if (o.graph) {
          if (graph_images.size() == 0) {
            graph_images = image_tensor(batch->images.extents(), stream);
            graph_labels = label_tensor(batch->labels.extents(), stream);
          }
          fs::copy_async(graph_images.view(), batch->images, stream);
          fs::copy_async(graph_labels.view(), batch->labels, stream);
          if (captured.captured()) {
            captured.replay();
            trainer.check_not_stopped();  // Inf/NaN gradients: the error, without waiting for the GPU
          } else {
            trainer.step(graph_images, graph_labels, ex);  // eager once: plans and pools settle
            captured.capture(stream, [&] { trainer.step(graph_images, graph_labels, ex); });
            ++step;
            continue;
          }
          done = true;
        }
      }
#endif
      if (!done) trainer.step(batch->images, batch->labels, ex);
      ++step;
      if (!o.quiet && step % std::max<fs::index_t>(1, steps_per_epoch / 10) == 0)
        progress(o.quiet, epoch + 1, o.epochs, double(step) / double(steps_per_epoch), trainer.loss().totals());
    }
    wait(ex);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const nn::loss_totals trained = trainer.loss().totals();
    progress(o.quiet, epoch + 1, o.epochs, 1.0, trained);

    trainer.loss().reset(ex);
    test_loader.start_epoch(0);
    while (const auto* batch = test_loader.next()) trainer.evaluate(batch->images, batch->labels, ex);
    test = trainer.loss().totals();
    report_epoch(o, epoch, trained, test, seconds);
    if (!o.checkpoint.empty())
      fs::optim::save_training_state(o.checkpoint, trainer, {{"epoch", std::to_string(epoch + 1)}});
  }
  if (first_epoch == o.epochs) {  // resumed after the last epoch: the verdict is the saved network's
    trainer.loss().reset(ex);
    test_loader.start_epoch(0);
    while (const auto* batch = test_loader.next()) trainer.evaluate(batch->images, batch->labels, ex);
    test = trainer.loss().totals();
  }
  return verdict(o, test, device);
}

// 1 for the data set (missing, truncated, corrupt), a checkpoint (cannot be
// written or read) and Inf/NaN gradients; 2 for the rest: the command line.
inline int exit_status_of(const std::exception& e) {
  const bool data_or_run = dynamic_cast<const fs::data_error*>(&e) != nullptr ||
                           dynamic_cast<const fs::io::checkpoint_error*>(&e) != nullptr ||
                           dynamic_cast<const fs::optim::nonfinite_error*>(&e) != nullptr;
  return data_or_run ? 1 : 2;
}

// Parses the options, picks the device and runs: GPU (bf16 with fp32 master
// weights) when one is present and the program was built by nvcc, else the host (fp32).
template <class Sequential>
int main(int argc, char** argv, const char* network_name, options defaults = {}) {
  try {
    const std::optional<options> o = parse(argc, argv, defaults);
    if (!o) return 0;
#if FUSOR_HAS_CUDA
    if (o->device != "host" && fs::cuda::available()) {
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
    if (o->device == "cuda") throw fs::error("--device cuda, but this program was built without CUDA (use the _cuda build)");
#endif
    return train<Sequential, fs::fp32, fs::host_space>(*o, fs::host_executor{}, "the host (fp32, OpenMP + OpenBLAS)",
                                                       network_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return exit_status_of(e);
  }
}

}  // namespace example
