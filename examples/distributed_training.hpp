// examples/distributed_training.hpp — what the Fashion-MNIST programs of
// several ranks (mpirun: fashion_mnist_data_parallel, tensor_parallel_mlp,
// pipeline_mlp) share on top of fashion_mnist_training.hpp: they write their
// own epoch loops, so they print progress and epoch lines themselves, save and
// resume distributed checkpoints, and turn a usage error into one message.
// Kept apart so that the single-process examples do not compile it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include <fusor/parallel/distributed_checkpoint.hpp>

#include "fashion_mnist_training.hpp"

namespace example {

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

// Waits for the work queued on the executor (before an epoch's time is taken).
inline void wait([[maybe_unused]] const fs::host_executor& ex) {}
#if FUSOR_HAS_CUDA
inline void wait(const fs::cuda_executor& ex) { ex.synchronize(); }
#endif

// Checkpoints of the programs that train over several ranks: --checkpoint is
// a folder of saves (parallel/distributed_checkpoint.hpp), each epoch's in its
// own subfolder, every rank writing its shard; `latest` names the newest.
// --resume continues from it on any number of ranks and any split.
//
// The epoch to start from: 0, or the one after the latest save (loaded into `trainer`; a collective over
// `world`: where a rank refuses the save, every rank throws).
//
// Before anything is loaded, the folder is proven writable for this rank's
// shard of about `shard_bytes` (io::check_destination): a save that cannot
// work fails now, not after the first epoch. Then `speaker` starts the --metrics
// CSV (kept on resume, else cut to its header), as app::fit does.
template <class Trainer, class Communicator, class Executor>
int resume_distributed(const options& o, Trainer& trainer, Communicator& world,
                       const fs::parallel::checkpoint_rank& where, const Executor& ex, bool speaker,
                       std::uint64_t shard_bytes) {
  const auto resolved = [](const std::filesystem::path& p) {  // a path that cannot be resolved: as given
    std::error_code ec;
    const std::filesystem::path r = std::filesystem::weakly_canonical(p, ec);
    return ec ? p : r;
  };
  if (!o.checkpoint.empty() && !o.metrics.empty() && resolved(o.checkpoint) == resolved(o.metrics))
    throw fs::app::usage_error("--checkpoint and --metrics are the same path '" + o.metrics.string() +
                               "': the checkpoint folder and the CSV file would overwrite each other");
  if (!o.checkpoint.empty()) fs::io::check_destination(o.checkpoint, fs::io::destination_kind::folder, shard_bytes);
  if (speaker && !o.metrics.empty()) fs::io::check_destination(o.metrics, fs::io::destination_kind::file, 0, "metrics");
  int epoch = 0;
  if (const auto last = o.resume ? fs::parallel::latest_distributed_save(o.checkpoint) : std::nullopt) {
    const auto metadata = fs::parallel::load_distributed(*last, trainer, world, where, ex);  // every rank, or none
    epoch = fs::app::saved_epoch(metadata, *last, o.epochs);
    if (speaker)
      std::printf("resumed from %s after epoch %d (saved by a %s data x tensor x pipeline mesh)\n", last->c_str(),
                  epoch, metadata.at("training.mesh").c_str());
  } else if (o.resume && speaker) {
    std::printf("no finished save in %s yet: starting afresh\n", o.checkpoint.c_str());
  }
  if (speaker && !o.metrics.empty()) fs::app::start_metrics_csv(o.metrics, epoch > 0);
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

}  // namespace example
