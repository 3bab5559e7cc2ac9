// examples/fashion_mnist_training.cpp — the non-template half of
// fashion_mnist_training.hpp (options, command line, data sets, the verdict),
// compiled once into the examples' library fusor_example_training instead of
// in every example. A project that copies an example compiles this file too.
#include "fashion_mnist_training.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace example {

void declare_options(fs::app::command_line& cli, options& o) {
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
      .path("--checkpoint", o.checkpoint,
            o.checkpoint_folder ? "save every rank's shard of parameters and optimizer state into this folder after "
                                  "every epoch (a subfolder an epoch; safetensors)"
                                : "save parameters and optimizer state to this file after every epoch (safetensors)",
            o.checkpoint_folder ? "DIR" : "FILE")
      .flag("--resume", o.resume, "continue from --checkpoint (from scratch where it holds no save yet)")
      .number("--require-accuracy", o.require_accuracy, "exit with status 1 when the final test accuracy is below X",
              app::between(0.0, 1.0))
      .flag("--quiet", o.quiet, "no progress bar")
      .path("--metrics", o.metrics, "write each epoch's losses and accuracies to this CSV file (--resume continues it)");
}

std::optional<options> parse(int argc, char** argv, options o,
                             const std::function<void(fs::app::command_line&)>& more,
                             const char* summary, bool speaker) {
  fs::app::command_line cli(summary);
  cli.print_help(speaker);
  declare_options(cli, o);
  if (more) more(cli);
  cli.epilogue(exit_statuses);
  if (!cli.parse(argc, argv)) return std::nullopt;
  if (o.resume && o.checkpoint.empty()) throw fs::app::usage_error("--resume needs --checkpoint");
  // The metrics CSV is started (an existing one cut to its header, or kept on resume) only once the data set and
  // the checkpoint are proven good, by app::fit or resume_distributed: a failing command leaves it as it was.
  return o;
}

int verdict(const options& o, const nn::loss_totals& test, const std::string& where, bool speaker) {
  if (speaker) std::printf("final test accuracy %.2f%% (%s)\n", 100 * test.accuracy, where.c_str());
  if (test.accuracy >= o.require_accuracy) return 0;
  if (speaker) std::printf("below the required %.2f%%\n", 100 * o.require_accuracy);
  return 1;
}

data_sets load_data(const options& o, fs::index_t batch) {
  data_sets d{fs::data::load_fashion_mnist(fs::data::split::train, o.data),
              fs::data::load_fashion_mnist(fs::data::split::test, o.data)};
  if (o.train_limit > 0) d.train = fs::data::take_first(d.train, std::min(o.train_limit, d.train.count));
  if (o.test_limit > 0) d.test = fs::data::take_first(d.test, std::min(o.test_limit, d.test.count));
  // The networks here take 28 x 28 images: another size would fail only at the first evaluation, an epoch later.
  for (const auto& [set, name] : {std::pair{&d.train, "training"}, std::pair{&d.test, "test"}}) {
    if (set->rows != 28 || set->cols != 28)
      throw fs::data_error("the " + std::string(name) + " set in '" + o.data.string() + "' holds images of " +
                                 std::to_string(set->rows) + " x " + std::to_string(set->cols) +
                                 " pixels; these examples' networks take Fashion-MNIST's 28 x 28");
  }
  if (d.test.count == 0)
    throw fs::data_error("the test set in '" + o.data.string() + "' holds no images: nothing to measure on");
  if (d.train.count < std::max(batch, o.batch))
    throw fs::app::usage_error("the training set (" + std::to_string(d.train.count) + " images) is smaller than one batch (" +
                               std::to_string(std::max(batch, o.batch)) + "): lower --batch or raise --train-limit");
  return d;
}

fs::data::loader_options loader_settings(const options& o, bool training) {
  fs::data::loader_options l{.batch_size = o.batch, .seed = o.seed, .prefetch = 3, .mean = 0.2860f, .std = 0.3530f};
  l.drop_last = training;
  l.shuffle = training;
  return l;
}

int exit_status_of(const std::exception& e) {
  return dynamic_cast<const fs::app::usage_error*>(&e) != nullptr ? 2 : 1;
}

}  // namespace example
