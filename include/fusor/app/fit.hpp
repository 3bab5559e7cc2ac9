// app/fit.hpp — the training loop every program writes, as one call:
//
//   fusor::app::fit_options o{.epochs = 10, .checkpoint = "run.safetensors", .resume = true, .patience = 3};
//   const fusor::app::fit_result r = fusor::app::fit(trainer, train_loader, test_loader, ex, o);
//
// Each epoch: the training batches through trainer.step (on the GPU, after one
// eager step, replayed as a captured CUDA graph), a progress bar, a pass over
// the validation batches, a summary line, a CSV line (`metrics`), a checkpoint
// (`checkpoint`, and `best_checkpoint` when the validation loss improved), and
// early stopping after `patience` epochs without improvement. A resumed run
// continues after the checkpoint's epoch with the same early-stopping state
// and the same CSV (lines of epochs after the checkpoint's are dropped), so an
// interrupted run and one that never stopped end alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/app/command_line.hpp"
#include "fusor/config.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/io/checkpoint.hpp"
#include "fusor/io/file.hpp"
#include "fusor/nn/loss.hpp"
#include "fusor/optim/training_checkpoint.hpp"
#if FUSOR_HAS_CUDA
#include "fusor/core/copy.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/graph/capture.hpp"
#endif

namespace fusor::app {

/// What fit() does around the training steps; every field has a sensible default.
struct fit_options {
  int epochs = 10;                          ///< epochs to train in all, counting those a resumed checkpoint had done
  bool graph = true;  ///< on the GPU, replay each step as a captured CUDA graph (on a created stream; on the
                      ///< default stream, which cannot be captured, steps run one by one)
  std::filesystem::path checkpoint{};       ///< when set, the training state is saved there after every epoch
  bool resume = false;                      ///< continue from `checkpoint` when that file exists
  std::filesystem::path best_checkpoint{};  ///< when set, saved after each epoch that lowers the validation loss
  int patience = 0;                         ///< stop after this many epochs without a lower validation loss (0: never)
  double min_improvement = 0;               ///< how much lower a validation loss must be to count as lower
  std::filesystem::path metrics{};          ///< when set, a CSV line per epoch (scripts/plot_results.py plots it)
  bool progress = true;                     ///< a progress bar on stdout, updated ten times an epoch
  bool report = true;                       ///< a summary line on stdout after each epoch
  std::string validation_name = "test";     ///< what the summary line calls the validation set
};

/// One epoch's figures, as fit() reports them (numbered from 1).
struct epoch_result {
  int epoch = 0;                  ///< 1 for the first epoch
  nn::loss_totals train;          ///< loss and accuracy over the epoch's training steps
  nn::loss_totals validation;     ///< loss and accuracy over the whole validation set after the epoch
  double seconds = 0;             ///< wall time of the training steps (validation excluded)
  double samples_per_second = 0;  ///< training samples over `seconds`
};

/// What fit() did: the epochs it ran and where it stopped.
struct fit_result {
  std::vector<epoch_result> epochs;  ///< the epochs this call ran (not those of a resumed checkpoint)
  int resumed_after = 0;             ///< the checkpoint's epoch a resumed run continued after (0: a fresh run)
  int best_epoch = 0;                ///< the epoch with the lowest validation loss so far, resumed ones included
  double best_validation_loss = std::numeric_limits<double>::infinity();  ///< that epoch's validation loss
  bool stopped_early = false;        ///< early stopping ended the run before `epochs`
  nn::loss_totals validation;        ///< the final network's loss and accuracy on the validation set
};

/// Code fit() runs at its two moments a program may want to speak: each is optional.
struct fit_hooks {
  /// After the checkpoint destination is proven writable and a resumed state loaded (its epoch, or 0), before
  /// the first epoch: where a program prints its banner, so that no mistake is found after it.
  std::function<void(int resumed_after)> on_start{};
  /// After each epoch, once its figures are printed and its checkpoint saved.
  std::function<void(const epoch_result&)> on_epoch{};
};

/// The header of the CSV that fit_options::metrics names; each epoch adds a line of these columns.
inline constexpr const char* metrics_header =
    "epoch,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_second,seconds";

/// The progress bar fit() prints: "\repoch 3/10 [######.....]  50%  loss 0.4123  acc  85.2%".
FUSOR_DECL void print_progress(int epoch, int epochs, double fraction, const nn::loss_totals& t);

/// The line fit() prints after each epoch: "epoch 3/10  train loss 0.4123  test loss 0.4321  test accuracy
/// 85.20%  30000 samples/s  (2.0 s)", on a new line when a progress bar (`after_progress`) is on this one.
FUSOR_DECL void print_epoch_summary(const epoch_result& e, int epochs, const std::string& validation_name,
                                    bool after_progress);

namespace detail {
// The lines of a metrics CSV after its header; an error when the file is not one.
FUSOR_DECL std::vector<std::string> metrics_lines(const std::filesystem::path& file);
FUSOR_DECL void write_metrics(const std::filesystem::path& file, const std::vector<std::string>& lines);
}  // namespace detail

/// Starts the metrics CSV `file` before training: a fresh run (`resumed` false) replaces it by the header
/// alone; a resumed run keeps it (checking that it is one) or starts it. An unwritable path fails here.
FUSOR_DECL void start_metrics_csv(const std::filesystem::path& file, bool resumed);

/// Adds epoch `e`'s line to the metrics CSV `file`, dropping lines of epoch e.epoch and later (left by a run
/// that stopped after its last checkpoint). The file is replaced atomically: a crash leaves the previous one.
FUSOR_DECL void append_metrics_csv(const std::filesystem::path& file, const epoch_result& e);

namespace detail {

inline void wait_for(const host_executor&) {}
#if FUSOR_HAS_CUDA
inline void wait_for(const cuda_executor& ex) { ex.synchronize(); }
#endif

// Early stopping's state: kept in the checkpoint's metadata so a resumed run goes on counting.
struct stopping_state {
  int best_epoch = 0;
  double best_loss = std::numeric_limits<double>::infinity();
  int epochs_without_improvement = 0;

  std::map<std::string, std::string> metadata(int epoch) const;
  // From a checkpoint's metadata; one saved by other code (no fit.* keys) starts afresh.
  void restore(const std::map<std::string, std::string>& m, const std::filesystem::path& file);
};

// Throws usage_error if two of the files fit writes (checkpoint, best_checkpoint, metrics) are one: each save
// would overwrite the other's file.
FUSOR_DECL void check_distinct_files(const fit_options& o);

}  // namespace detail

/// The epoch a checkpoint was saved after (its "epoch" metadata), checked against the `epochs` of the run that
/// resumes it: an io::checkpoint_error names the file and the key, a usage_error says to ask for more epochs.
FUSOR_DECL int saved_epoch(const std::map<std::string, std::string>& metadata, const std::filesystem::path& file,
                           int epochs);

/// The loss and accuracy of `trainer`'s network over every batch of `data` (a pass in order, no update).
/// Throws fusor::error if a label lies outside the network's classes (nn::check_labels_inside).
template <class Trainer, class Loader, class Executor>
nn::loss_totals evaluate(Trainer& trainer, Loader& data, const Executor& ex) {
  trainer.loss().reset(ex);
  data.start_epoch(0);
  while (const auto* batch = data.next()) trainer.evaluate(batch->images, batch->labels, ex);
  const nn::loss_totals totals = trainer.loss().totals();
  nn::check_labels_inside(totals, "fusor::app::evaluate");
  return totals;
}

/// Trains `trainer` for fit_options::epochs over `train` (a data::loader, or
/// anything with start_epoch(epoch), next() -> batch* {images, labels} and
/// batches_per_epoch()), evaluating on `validation` after each epoch; see the
/// top of app/fit.hpp. The trainer must be initialize()d. Throws what a step
/// throws (Inf/NaN gradients: optim::nonfinite_error), io errors naming the
/// file, and usage_error for a checkpoint saved beyond `epochs` or a loader that yields no batch, all of these
/// before the first step; fusor::error after an epoch that met a label outside
/// the classes (before its checkpoint). `hooks` run at the start and after each epoch.
template <class Trainer, class Loader, class Executor>
fit_result fit(Trainer& trainer, Loader& train, Loader& validation, const Executor& ex, const fit_options& o,
               const fit_hooks& hooks = {}) {
  if (o.epochs < 0) throw usage_error("fusor::app::fit: epochs is " + std::to_string(o.epochs) + ", not a count");
  if (o.patience < 0) throw usage_error("fusor::app::fit: patience is " + std::to_string(o.patience) + ", not a count");
  if (!(o.min_improvement >= 0) || !std::isfinite(o.min_improvement))
    throw usage_error("fusor::app::fit: min_improvement is " + std::to_string(o.min_improvement) +
                      ", not a finite amount of at least 0");
  if (o.resume && o.checkpoint.empty()) throw usage_error("fusor::app::fit: resume needs a checkpoint file");
  // An empty set would train nothing, or report a loss and accuracy of 0 as if measured.
  if (train.batches_per_epoch() <= 0)
    throw usage_error("fusor::app::fit: the training loader yields no batch an epoch (an empty data set, or "
                      "fewer samples than a batch with drop_last)");
  if (validation.batches_per_epoch() <= 0)
    throw usage_error("fusor::app::fit: the " + std::string(o.validation_name) +
                      " loader yields no batch (an empty data set?)");
  detail::check_distinct_files(o);
  // A save that cannot work fails now, not after the first epoch.
  for (const std::filesystem::path* save : {&o.checkpoint, &o.best_checkpoint})
    if (!save->empty()) io::check_destination(*save, io::destination_kind::file, optim::training_state_bytes(trainer));
  if (!o.metrics.empty()) io::check_destination(o.metrics, io::destination_kind::file, 0, "metrics");

  fit_result result;
  detail::stopping_state stopping;
  if (o.resume && std::filesystem::exists(o.checkpoint)) {
    const auto metadata = optim::load_training_state(o.checkpoint, trainer);
    result.resumed_after = saved_epoch(metadata, o.checkpoint, o.epochs);
    stopping.restore(metadata, o.checkpoint);
    if (o.report) std::printf("resumed from %s after epoch %d\n", o.checkpoint.c_str(), result.resumed_after);
  } else if (o.resume && o.report) {
    std::printf("no checkpoint %s yet: starting afresh\n", o.checkpoint.c_str());
  }
  if (!o.metrics.empty()) start_metrics_csv(o.metrics, result.resumed_after > 0);
  if (hooks.on_start) hooks.on_start(result.resumed_after);
  const index_t steps_per_epoch = train.batches_per_epoch();
  const index_t progress_every = std::max<index_t>(1, steps_per_epoch / 10);

#if FUSOR_HAS_CUDA
  // On the GPU the captured step reads fixed buffers; each batch is copied into them.
  constexpr bool on_device = !std::is_same_v<Executor, host_executor>;
  using batch_type = std::remove_cvref_t<decltype(*train.next())>;
  using images_type = std::remove_cvref_t<decltype(std::declval<const batch_type&>().images)>;
  using labels_type = std::remove_cvref_t<decltype(std::declval<const batch_type&>().labels)>;
  tensor<typename images_type::element_type, typename images_type::extents_type, row_major,
         typename images_type::space> graph_images;
  tensor<typename labels_type::element_type, typename labels_type::extents_type, row_major,
         typename labels_type::space> graph_labels;
  graph::captured_step captured;
#endif

  const bool stopped_before = o.patience > 0 && stopping.epochs_without_improvement >= o.patience;
  for (int epoch = result.resumed_after; epoch < o.epochs && !stopped_before; ++epoch) {
    trainer.loss().reset(ex);
    train.start_epoch(static_cast<std::uint64_t>(epoch));
    const auto start = std::chrono::steady_clock::now();
    index_t step = 0;
    while (const auto* batch = train.next()) {
      bool done = false;
#if FUSOR_HAS_CUDA
      if constexpr (on_device) {
        // The legacy default stream cannot be captured; a last batch smaller than the captured one (drop_last
        // false) runs eagerly.
        const bool fits_graph = graph_images.size() == 0 || batch->images.extent(0) == graph_images.extent(0);
        if (o.graph && ex.stream != nullptr && fits_graph) {
          if (graph_images.size() == 0) {
            graph_images = decltype(graph_images)(batch->images.extents(), ex.stream);
            graph_labels = decltype(graph_labels)(batch->labels.extents(), ex.stream);
          }
          copy_async(graph_images.view(), batch->images, ex.stream);
          copy_async(graph_labels.view(), batch->labels, ex.stream);
          if (captured.captured()) {
            captured.replay();
            trainer.check_not_stopped();  // Inf/NaN gradients: the error, without waiting for the GPU
          } else {
            // Views of the batch's own types: the step compiled for them serves both paths.
            const images_type images(graph_images.data(), graph_images.view().mapping());
            const labels_type labels(graph_labels.data(), graph_labels.view().mapping());
            trainer.step(images, labels, ex);  // eager once: plans and pools settle
            captured.capture(ex.stream, [&] { trainer.step(images, labels, ex); });
          }
          done = true;
        }
      }
#endif
      if (!done) trainer.step(batch->images, batch->labels, ex);
      ++step;
      if (o.progress && step % progress_every == 0)
        print_progress(epoch + 1, o.epochs, double(step) / double(steps_per_epoch), trainer.loss().totals());
    }
    detail::wait_for(ex);
    epoch_result e;
    e.epoch = epoch + 1;
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    e.train = trainer.loss().totals();
    nn::check_labels_inside(e.train, "fusor::app::fit: the training batches of epoch " + std::to_string(e.epoch));
    e.samples_per_second = double(e.train.samples) / std::max(e.seconds, 1e-9);
    if (o.progress) print_progress(e.epoch, o.epochs, 1.0, e.train);
    e.validation = evaluate(trainer, validation, ex);
    result.validation = e.validation;

    const bool improved = e.validation.mean_loss < stopping.best_loss - o.min_improvement;
    if (improved) {
      stopping.best_loss = e.validation.mean_loss;
      stopping.best_epoch = e.epoch;
      stopping.epochs_without_improvement = 0;
    } else {
      ++stopping.epochs_without_improvement;
    }
    if (o.report) print_epoch_summary(e, o.epochs, o.validation_name, o.progress);
    if (!o.metrics.empty()) append_metrics_csv(o.metrics, e);
    // The best first: the checkpoint names its epoch as the best, and a resumed run trusts that it was saved.
    if (improved && !o.best_checkpoint.empty())
      optim::save_training_state(o.best_checkpoint, trainer, stopping.metadata(e.epoch));
    if (!o.checkpoint.empty()) optim::save_training_state(o.checkpoint, trainer, stopping.metadata(e.epoch));
    result.epochs.push_back(e);
    if (hooks.on_epoch) hooks.on_epoch(e);
    if (o.patience > 0 && stopping.epochs_without_improvement >= o.patience) {
      result.stopped_early = epoch + 1 < o.epochs;
      if (o.report && result.stopped_early)
        std::printf("early stop: no lower %s loss for %d epochs (best %.4f after epoch %d)\n", o.validation_name.c_str(),
                    o.patience, stopping.best_loss, stopping.best_epoch);
      break;
    }
  }
  if (result.epochs.empty()) result.validation = evaluate(trainer, validation, ex);  // resumed after the last epoch
  result.stopped_early = result.stopped_early || (stopped_before && result.resumed_after < o.epochs);
  result.best_epoch = stopping.best_epoch;
  result.best_validation_loss = stopping.best_loss;
  return result;
}

}  // namespace fusor::app

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/app/impl/fit.ipp"
#endif
