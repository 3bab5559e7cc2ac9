// tests/parallel/kill_during_save.cpp — crash-safe saving (issue 15): a training
// process that saves after every step (parallel::save_distributed_latest) is
// killed with SIGKILL at random moments, 200 times (seeded), and after each kill
//   - the newest complete save loads, its parameters are the ones it was saved
//     with (a checksum in its metadata), and training resumes from it;
//   - it is never older than the newest save seen before (nothing lost);
//   - no torn or half-written file is taken for a save (a load that fails, or
//     a checksum that differs, is a failure), and stray temporary files are
//     ignored and cleaned up by the next save.
//
//   kill_during_save [kills] [folder]    the test (ctest: parallel_checkpoint_kill)
//   kill_during_save --train <folder>     the child: resume, then step and save until killed
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fusor/comm/single.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/parallel/distributed_checkpoint.hpp>

namespace fs = std::filesystem;
namespace nn = fusor::nn;
namespace optim = fusor::optim;
namespace parallel = fusor::parallel;
using fusor::index_t;

namespace {

// ~19k parameters and AdamW's state: a save of ~300 KB, long enough to be killed inside.
using mlp = nn::sequential<nn::features<64>, nn::linear<64, 256, nn::relu>, nn::linear<256, 10>>;
using network_t = nn::network<mlp, fusor::fp32, fusor::host_space>;
using trainer_t = optim::trainer<network_t, optim::adamw>;
constexpr index_t batch = 16;
constexpr const char* checksum_key = "test.parameter_checksum";

// FNV-1a over every parameter's bytes.
std::string checksum(const network_t& net) {
  std::uint64_t h = 1469598103934665603ull;
  net.for_each_parameter([&](const nn::parameter_slot&, const auto& values, const auto&) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
    for (std::size_t i = 0; i != std::size_t(values.size()) * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  });
  return std::to_string(h);
}

struct run {
  network_t net{batch, {.seed = 7}};
  trainer_t train{net, {.schedule = optim::learning_rate_schedule::constant(1e-3f)}, optim::adamw_options{}};
  fusor::comm::single world;
  run() { train.initialize(fusor::host_executor{}); }

  // Loads the newest complete save under `root` (none: a fresh start); returns its steps.
  std::uint64_t resume(const fs::path& root) {
    const auto last = parallel::latest_distributed_save(root);
    if (!last) return 0;
    const auto meta = parallel::load_distributed(*last, train, parallel::single_process, fusor::host_executor{});
    const auto it = meta.find(checksum_key);
    if (it == meta.end() || it->second != checksum(net))
      throw std::runtime_error("'" + last->string() + "' loads, but its parameters are not those it was saved with");
    return train.steps_taken();
  }
  void step(std::uint64_t s) {
    fusor::tensor<float, fusor::extents<index_t, fusor::dynamic, 64>> x(batch);
    fusor::tensor<std::int32_t, fusor::dextents<index_t, 1>> y{fusor::dextents<index_t, 1>(batch)};
    std::mt19937 rng(std::uint32_t(1000 + s));
    std::uniform_real_distribution<float> u(-1, 1);
    for (index_t i = 0; i < x.size(); ++i) x.data()[i] = u(rng);
    for (index_t i = 0; i < batch; ++i) y.data()[i] = std::int32_t(rng() % 10);
    train.step(x, y, fusor::host_executor{});
  }
  void save(const fs::path& root) {
    const std::uint64_t s = train.steps_taken();
    parallel::save_distributed_latest(root, train, world, parallel::single_process, "step-" + std::to_string(s),
                                      {{checksum_key, checksum(net)}}, fusor::host_executor{});
  }
};

int child(const fs::path& root) {
  run r;
  for (std::uint64_t s = r.resume(root);; ++s) {
    r.step(s);
    r.save(root);
  }
}

// Files under `root` whose names mark them as temporaries (".<name>.tmp.<pid>.<n>").
std::vector<fs::path> temporaries(const fs::path& root) {
  std::vector<fs::path> found;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) found.push_back(e.path());
  return found;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "kill_during_save: FAILED: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--train") {
    try {
      return child(argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kill_during_save --train: %s\n", e.what());
      return 1;
    }
  }
  const int kills = argc > 1 ? std::atoi(argv[1]) : 200;
  const fs::path root = argc > 2 ? fs::path(argv[2]) : fs::temp_directory_path() / ("fusor-kill-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  std::mt19937 rng(2026);
  // Kills 2 to 40 ms after the start; where a kill came before any new save
  // completed (a loaded machine), the next one may come later, so the run advances.
  int latest_us = 40000;
  std::uint64_t newest = 0;
  int stray_seen = 0;
  for (int k = 0; k < kills; ++k) {
    const pid_t pid = ::fork();
    if (pid < 0) return fail("fork failed");
    if (pid == 0) {
      ::execl("/proc/self/exe", argv[0], "--train", root.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(2000, latest_us)(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status))
      return fail("kill " + std::to_string(k) + ": the child ended by itself (exit status " +
                  std::to_string(WEXITSTATUS(status)) + ") before it was killed");
    // The newest complete save: loads, matches its checksum, never older than the last one seen.
    std::uint64_t steps = 0;
    try {
      run check;
      steps = check.resume(root);
      if (steps > 0) {
        check.step(steps);  // training goes on from it
        check.train.check_not_stopped();
      }
    } catch (const std::exception& e) {
      return fail("after kill " + std::to_string(k) + ": the newest save does not load: " + e.what());
    }
    if (steps < newest)
      return fail("after kill " + std::to_string(k) + ": the newest save holds " + std::to_string(steps) +
                  " steps, an earlier one held " + std::to_string(newest));
    latest_us = steps > newest ? 40000 : std::min(latest_us * 3 / 2, 2000000);
    newest = steps;
    const auto stray = temporaries(root);
    stray_seen += !stray.empty();
    // Each write removes its own file's stale temporaries (io/file.hpp), so a
    // file has at most one: that of the last process killed while writing it.
    // A save writes four files (this rank's shard and its index, the manifest,
    // then `latest`), and a kill inside each of them in turn, last file first
    // (each process resuming from the same save), leaves one beside each.
    std::map<fs::path, int> per_file;  // temporaries of each file they stand for
    for (const auto& t : stray) {
      const std::string name = t.filename().string();
      if (++per_file[t.parent_path() / name.substr(1, name.find(".tmp.") - 1)] > 1)
        return fail("after kill " + std::to_string(k) + ": two temporary files of one file, one of them '" +
                    t.string() + "' (earlier ones were not cleaned up)");
    }
    if (stray.size() > 4)
      return fail("after kill " + std::to_string(k) + ": " + std::to_string(stray.size()) +
                  " temporary files, the first '" + stray.front().string() + "': more than a save writes files");
  }
  // One more good save: every temporary a kill left behind is gone after it.
  try {
    run last;
    last.step(last.resume(root));
    last.save(root);
  } catch (const std::exception& e) {
    return fail(std::string("the save after the last kill failed: ") + e.what());
  }
  if (const auto stray = temporaries(root); !stray.empty())
    return fail(std::to_string(stray.size()) + " temporary files remain after a good save, the first '" +
                stray.front().string() + "'");
  std::printf("kill_during_save: %d kills; the newest save always loaded and resumed (last: %llu steps); %d kills "
              "left a temporary file behind (killed inside a write), none remained after the next good save\n",
              kills, static_cast<unsigned long long>(newest), stray_seen);
  fs::remove_all(root);
  if (newest == 0) return fail("no save ever completed: the kills came too early to test anything");
  return 0;
}
