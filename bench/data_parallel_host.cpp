// bench/data_parallel_host.cpp — the training step of the main job's MLP
// (784-512-256-10, AdamW, fp32, global batch 128) data-parallel over MPI ranks
// on the host: step time, samples/s, the communication left exposed after
// backward, and the bytes handed to collectives per step, for bucket sizes,
// overlap on and off, bf16 communication, ZeRO-1, 2 and 3 and PowerSGD (ranks
// 4 and 1), and the memory each rank holds (data_parallel::memory(); the
// parameters, 2.14 MB, are the same everywhere but under ZeRO-3, where the
// table's total includes this rank's share of them and two bucket slabs).
// Rank 0 prints a Markdown table.
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
//     mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/bench_data_parallel_host
//   (options: --steps N (per round, default 20), --rounds N (default 7), --batch N (global, default 128))
//
// Timing: every configuration runs 3 warm-up steps, then rounds of N steps
// between barriers, the configurations in turn within each round; a round's
// time is the slowest rank's; the median round is reported. Inputs are standard normal, labels uniform, eight batches cycled,
// the same on every rank. "exposed" is, per step, how long after backward ended
// the last bucket's collective was seen complete (0 when communication was
// hidden behind backward), plus ZeRO-1's all-gather of the parameters (for
// PowerSGD: from the end of backward to its sums being done), the median over
// every measured step (the slowest rank's).
// With one rank the row "optim::trainer" is the same step without data_parallel.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <optional>
#include <string>
#include <vector>

#include <fusor/app/command_line.hpp>
#include <fusor/comm/mpi.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/parallel/data_parallel.hpp>

namespace {

namespace fs = fusor;
namespace nn = fusor::nn;
namespace optim = fusor::optim;
namespace parallel = fusor::parallel;

using mlp = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu>, nn::linear<512, 256, nn::relu>,
                           nn::linear<256, 10>>;
using network_t = nn::network<mlp, fs::fp32, fs::host_space>;
using image_batch = fs::tensor<float, fs::dextents<fs::index_t, 2>>;
using label_batch = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 1>>;

const optim::trainer_options trainer_settings{.schedule = optim::learning_rate_schedule::constant(1e-3f)};
const optim::adamw_options adamw_settings{.weight_decay = 1e-4f};

struct settings {
  int steps = 20, rounds = 7;
  fs::index_t batch = 128;
};

struct batches {
  std::vector<image_batch> images;
  std::vector<label_batch> labels;
  explicit batches(fs::index_t batch) {
    std::mt19937 engine(2026);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<std::int32_t> label(0, 9);
    for (int b = 0; b < 8; ++b) {
      images.emplace_back(batch, fs::index_t{784});
      labels.emplace_back(batch);
      for (fs::index_t i = 0; i < images.back().size(); ++i) images.back().data()[i] = normal(engine);
      for (fs::index_t i = 0; i < batch; ++i) labels.back().data()[i] = label(engine);
    }
  }
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double slowest(fs::comm::mpi& world, double seconds) {
  double worst = 0;
  MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, world.native());
  return worst;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One row of the table: a trainer's step and what it reports.
struct configuration {
  std::string name;
  std::function<void(int)> step;             // step on batch i % 8
  std::function<double()> exposed;           // the last step's exposed communication, seconds
  std::size_t buckets = 0;
  fs::index_t bytes = 0;
  std::vector<double> round_seconds, exposed_seconds;
  parallel::memory_report memory{};  // what one rank holds (data_parallel's report)
};

// Keeps each configuration's network and trainer alive while the rounds run.
struct trainers {
  std::vector<std::shared_ptr<void>> owned;
  std::vector<configuration> rows;
};

void add_data_parallel(trainers& t, fs::comm::mpi& world, const settings& s, const batches& data, const char* name,
                       parallel::data_parallel_options p) {
  using trainer_t = parallel::data_parallel<network_t, optim::adamw, fs::comm::mpi>;
  auto net = std::make_shared<network_t>(s.batch / (world.size() * p.micro_batches), nn::network_options{.seed = 1});
  auto train = std::make_shared<trainer_t>(*net, world, trainer_settings, adamw_settings, p);
  train->initialize(fs::host_executor{});
  t.owned.push_back(net);
  t.owned.push_back(train);
  configuration c{name,
                  [train, &data](int i) { train->step(data.images[i % 8], data.labels[i % 8], fs::host_executor{}); },
                  [train] {
                    double last = train->timeline().backward_end;
                    for (const auto& b : train->timeline().buckets) last = std::max(last, b.completed);
                    const auto& t = train->timeline();  // ZeRO-1's all-gather is communication too (ZeRO-3's overlap forward and backward)
                    if (t.compression_end >= 0) last = t.compression_end;  // PowerSGD: factors and collectives
                    return last - t.backward_end + (t.gather_start >= 0 ? t.gather_end - t.gather_start : 0.0);
                  },
                  train->buckets().buckets.size(), train->bytes_per_step(), {}, {}, train->memory()};
  t.rows.push_back(std::move(c));
}

void add_trainer(trainers& t, const settings& s, const batches& data) {
  auto net = std::make_shared<network_t>(s.batch, nn::network_options{.seed = 1});
  auto train = std::make_shared<optim::trainer<network_t, optim::adamw>>(*net, trainer_settings, adamw_settings);
  train->initialize(fs::host_executor{});
  t.owned.push_back(net);
  t.owned.push_back(train);
  t.rows.push_back({"optim::trainer (no data_parallel)",
                    [train, &data](int i) { train->step(data.images[i % 8], data.labels[i % 8], fs::host_executor{}); },
                    [] { return 0.0; }, 0, 0, {}, {}, {}});
}

// Rounds in turn over the configurations (so a busy moment of a shared machine
// does not fall on one of them alone), then the table.
void measure(fs::comm::mpi& world, const settings& s, trainers& t) {
  for (auto& c : t.rows)
    for (int i = 0; i < 3; ++i) c.step(i);
  for (int r = 0; r < s.rounds; ++r) {
    for (auto& c : t.rows) {
      MPI_Barrier(world.native());
      const double start = now();
      for (int i = 0; i < s.steps; ++i) {
        c.step(i);
        c.exposed_seconds.push_back(c.exposed());
      }
      c.round_seconds.push_back(slowest(world, now() - start) / s.steps);
    }
  }
  for (auto& c : t.rows) {
    const double seconds = median(c.round_seconds), exposed = slowest(world, median(c.exposed_seconds));
    if (world.rank() != 0) continue;
    const auto& m = c.memory;
    std::printf("| %d | %s | %zu | %.2f | %.0f | %.2f | %.3f | %.2f / %.2f / %.2f / %.2f |\n", world.size(), c.name.c_str(),
                c.buckets, 1e3 * seconds, double(s.batch) / seconds, 1e3 * exposed, double(c.bytes) / 1e6,
                m.gradients / 1e6, m.optimizer_state / 1e6, m.communication / 1e6, m.total() / 1e6);
  }
  std::fflush(stdout);
}

// Empty after --help; a mistake throws (run_ranks reports it and ends the job).
std::optional<settings> parse(int argc, char** argv) {
  settings s;
  const bool go_on = fs::app::command_line("Data-parallel training steps over MPI ranks: buckets, overlap, bf16, ZeRO.")
                         .number("--steps", s.steps, "timed steps a round", fs::app::at_least(1))
                         .number("--rounds", s.rounds, "rounds (the median is reported)", fs::app::at_least(1))
                         .number("--batch", s.batch, "global batch", fs::app::at_least<fs::index_t>(1))
                         .parse(argc, argv);
  return go_on ? std::optional<settings>(s) : std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    const std::optional<settings> parsed = parse(argc, argv);
    if (!parsed) return 0;
    const settings& s = *parsed;
    const batches data(s.batch);
    if (world.rank() == 0)
      std::printf("MLP 784-512-256-10, AdamW, fp32, global batch %lld, %d ranks, %d steps x %d rounds\n\n"
                  "| ranks | configuration | buckets | ms/step | samples/s | exposed comm. ms | MB into collectives/step | "
                  "MB held a rank: gradients / optimizer / communication / total |\n"
                  "|---|---|---|---|---|---|---|---|\n",
                  (long long)s.batch, world.size(), s.steps, s.rounds);
    trainers t;
    if (world.size() == 1) add_trainer(t, s, data);
    add_data_parallel(t, world, s, data, "1 MiB buckets (default), overlap", {});
    add_data_parallel(t, world, s, data, "a bucket per layer, overlap", {.bucket_bytes = 1});
    add_data_parallel(t, world, s, data, "one bucket, overlap", {.bucket_bytes = fs::index_t{1} << 30});
    add_data_parallel(t, world, s, data, "a bucket per layer, overlap off", {.bucket_bytes = 1, .overlap = false});
    add_data_parallel(t, world, s, data, "1 MiB buckets, bf16 communication",
                      {.communication = parallel::gradient_communication::bf16});
    add_data_parallel(t, world, s, data, "1 MiB buckets, ZeRO-1", {.shard_optimizer_state = true});
    add_data_parallel(t, world, s, data, "1 MiB buckets, ZeRO-2", {.shard_gradients = true});
    add_data_parallel(t, world, s, data, "1 MiB buckets, ZeRO-3", {.shard_parameters = true});
    add_data_parallel(t, world, s, data, "256 KiB buckets, ZeRO-3", {.bucket_bytes = 1 << 18, .shard_parameters = true});
    add_data_parallel(t, world, s, data, "PowerSGD rank 4",
                      {.communication = parallel::gradient_communication::powersgd, .powersgd = {.rank = 4}});
    add_data_parallel(t, world, s, data, "PowerSGD rank 1",
                      {.communication = parallel::gradient_communication::powersgd, .powersgd = {.rank = 1}});
    measure(world, s, t);
    return 0;
  });
}
