// fusor/app/impl/fit.ipp — definitions of fusor/app/fit.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/app/fit.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fusor::app {

FUSOR_DECL void print_progress(int epoch, int epochs, double fraction, const nn::loss_totals& t) {
  const int width = 30, filled = std::clamp(static_cast<int>(fraction * width + 0.5), 0, width);
  std::printf("\repoch %d/%d [%.*s%.*s] %3.0f%%  loss %.4f  acc %5.1f%%", epoch, epochs, filled,
              "##############################", width - filled, "..............................", 100 * fraction,
              t.mean_loss, 100 * t.accuracy);
  std::fflush(stdout);
}

FUSOR_DECL void print_epoch_summary(const epoch_result& e, int epochs, const std::string& validation_name,
                                    bool after_progress) {
  std::printf("%sepoch %d/%d  train loss %.4f  %s loss %.4f  %s accuracy %.2f%%  %.0f samples/s  (%.1f s)\n",
              after_progress ? "\n" : "", e.epoch, epochs, e.train.mean_loss, validation_name.c_str(),
              e.validation.mean_loss, validation_name.c_str(), 100 * e.validation.accuracy, e.samples_per_second,
              e.seconds);
  std::fflush(stdout);
}

namespace detail {
FUSOR_DECL std::vector<std::string> metrics_lines(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line) || line != metrics_header)
    throw error("metrics file '" + file.string() + "' does not start with the header \"" + metrics_header +
                "\": name another file, or remove it");
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}
FUSOR_DECL void write_metrics(const std::filesystem::path& file, const std::vector<std::string>& lines) {
  std::string text = std::string(metrics_header) + "\n";
  for (const std::string& line : lines) text += line + "\n";
  io::write_file_atomically(file, std::as_bytes(std::span(text.data(), text.size())));
}
}  // namespace detail

FUSOR_DECL void start_metrics_csv(const std::filesystem::path& file, bool resumed) {
  const bool keep = resumed && std::filesystem::exists(file);
  detail::write_metrics(file, keep ? detail::metrics_lines(file) : std::vector<std::string>{});
}

FUSOR_DECL void append_metrics_csv(const std::filesystem::path& file, const epoch_result& e) {
  std::vector<std::string> lines;
  for (std::string& line : detail::metrics_lines(file)) {
    int epoch = 0;
    if (std::sscanf(line.c_str(), "%d,", &epoch) == 1 && epoch >= 1 && epoch < e.epoch) lines.push_back(std::move(line));
  }
  char line[256];
  std::snprintf(line, sizeof line, "%d,%.6f,%.6f,%.6f,%.6f,%.1f,%.3f", e.epoch, e.train.mean_loss, e.train.accuracy,
                e.validation.mean_loss, e.validation.accuracy, e.samples_per_second, e.seconds);
  lines.emplace_back(line);
  detail::write_metrics(file, lines);
}

namespace detail {

FUSOR_DECL std::map<std::string, std::string> stopping_state::metadata(int epoch) const {
  std::ostringstream best;
  best.precision(17);
  best << best_loss;
  return {{"epoch", std::to_string(epoch)},
          {"fit.best_epoch", std::to_string(best_epoch)},
          {"fit.best_validation_loss", best.str()},
          {"fit.epochs_without_improvement", std::to_string(epochs_without_improvement)}};
}

FUSOR_DECL void check_distinct_files(const fit_options& o) {
  const std::pair<const char*, const std::filesystem::path*> files[] = {
      {"checkpoint", &o.checkpoint}, {"best_checkpoint", &o.best_checkpoint}, {"metrics", &o.metrics}};
  const auto resolved = [](const std::filesystem::path& p) {
    std::error_code ec;
    const std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
    return ec ? std::filesystem::absolute(p, ec).lexically_normal() : c;
  };
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = i + 1; j < 3; ++j) {
      const std::filesystem::path &a = *files[i].second, &b = *files[j].second;
      if (a.empty() || b.empty()) continue;
      if (resolved(a) == resolved(b))
        throw usage_error("fusor::app::fit: " + std::string(files[i].first) + " and " + files[j].first +
                          " are the same file '" + a.string() + "': each save would overwrite the other");
    }
}

FUSOR_DECL void stopping_state::restore(const std::map<std::string, std::string>& m,
                                        const std::filesystem::path& file) {
  if (!m.contains("fit.best_epoch")) return;
  best_epoch = io::metadata_number<int>(m, "fit.best_epoch", file);
  // "inf": no epoch has lowered the loss yet (every validation loss NaN); otherwise a finite number.
  const std::string& best = io::metadata_text(m, "fit.best_validation_loss", file);
  best_loss = best == "inf" ? std::numeric_limits<double>::infinity()
                            : io::metadata_number<double>(m, "fit.best_validation_loss", file);
  epochs_without_improvement = io::metadata_number<int>(m, "fit.epochs_without_improvement", file);
}

}  // namespace detail

FUSOR_DECL int saved_epoch(const std::map<std::string, std::string>& metadata, const std::filesystem::path& file,
                           int epochs) {
  const int epoch = io::metadata_number<int>(metadata, "epoch", file);
  if (epoch < 0)
    throw io::checkpoint_error("checkpoint '" + file.string() + "': metadata 'epoch' is " + std::to_string(epoch) +
                               ", not a number of epochs");
  if (epoch > epochs)
    throw usage_error("checkpoint '" + file.string() + "' was saved after epoch " + std::to_string(epoch) +
                      ", beyond the " + std::to_string(epochs) + " epochs asked for: ask for more epochs to continue it");
  return epoch;
}

}  // namespace fusor::app
