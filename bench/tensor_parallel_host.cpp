// bench/tensor_parallel_host.cpp — a tensor-parallel training step on the host
// over MPI: its time at 1, 2, 4 and 8 ranks, the part of it spent in all-reduces
// (issue to completion; with one thread a rank that is also the time the rank
// waits for the slowest), and the bytes each rank puts into them.
//
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
//     mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_tensor_parallel_host [--steps 10]
//
// Two models, batch 128, AdamW, fp32: the examples' MLP 784-512-256-10 (one
// column -> row block, then a whole classifier) and two transformer-sized MLP
// blocks 1024-4096-1024 (GELU) twice, then a classifier of 10. Rank 0 prints a
// Markdown row per model.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fusor/app/command_line.hpp>
#include <fusor/comm/mpi.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/parallel/tensor_parallel.hpp>

namespace fs = fusor;
namespace nn = fusor::nn;

namespace {
using clock_type = std::chrono::steady_clock;
constexpr fs::index_t batch = 128;

template <int W>
using column = nn::parallel<nn::column_parallel<W>>;
template <int W>
using row = nn::parallel<nn::row_parallel<W>>;
template <int W>
using small_mlp = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu, column<W>>,
                                 nn::linear<512, 256, nn::relu, row<W>>, nn::linear<256, 10>>;
template <int W>
using wide_mlp = nn::sequential<nn::features<1024>, nn::linear<1024, 4096, nn::gelu_tanh, column<W>>,
                                nn::linear<4096, 1024, nn::identity, row<W>>,
                                nn::linear<1024, 4096, nn::gelu_tanh, column<W>>,
                                nn::linear<4096, 1024, nn::identity, row<W>>, nn::linear<1024, 10>>;

// The MPI communicator, timing each all-reduce from its issue to the end of its wait.
class timed_communicator {
 public:
  explicit timed_communicator(fs::comm::mpi& inner) : inner_(inner) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  int local_rank() const { return inner_.local_rank(); }
  template <class R>
  struct timed_request {
    R inner;
    timed_communicator* owner;
    clock_type::time_point start;
    void wait() {
      inner.wait();
      owner->seconds += std::chrono::duration<double>(clock_type::now() - start).count();
    }
    bool test() { return inner.test(); }
  };
  template <class V>
  auto all_reduce(const V& inout, fs::comm::reduction_op op) {
    ++calls;
    bytes += double(inout.size() * sizeof(typename V::element_type));
    return timed_request<fs::comm::mpi_request>{inner_.all_reduce(inout, op), this, clock_type::now()};
  }
  template <class... A>
  auto all_reduce(const A&... a) { return inner_.all_reduce(a...); }
  template <class... A>
  auto reduce_scatter(const A&... a) { return inner_.reduce_scatter(a...); }
  template <class... A>
  auto all_gather(const A&... a) { return inner_.all_gather(a...); }
  template <class... A>
  auto broadcast(const A&... a) { return inner_.broadcast(a...); }
  template <class... A>
  auto reduce(const A&... a) { return inner_.reduce(a...); }
  template <class... A>
  auto send(const A&... a) { return inner_.send(a...); }
  template <class... A>
  auto recv(const A&... a) { return inner_.recv(a...); }
  auto group() { return inner_.group(); }

  double seconds = 0, bytes = 0;
  long calls = 0;

 private:
  fs::comm::mpi& inner_;
};

template <class Sequential>
void run(fs::comm::mpi& world, const char* name, int ways, int steps) {
  using network_t = nn::network<Sequential, fs::fp32, fs::host_space>;
  constexpr fs::index_t features = network_t::input_features::size;
  fs::tensor<float, fs::dextents<fs::index_t, 2>> images(fs::dextents<fs::index_t, 2>(batch, features));
  fs::tensor<std::int32_t, fs::dextents<fs::index_t, 1>> labels{fs::dextents<fs::index_t, 1>(batch)};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (fs::index_t i = 0; i < images.size(); ++i) images.data()[i] = uniform(rng);
  for (fs::index_t i = 0; i < batch; ++i) labels.data()[i] = std::int32_t(rng() % 10);

  timed_communicator timed(world);
  network_t net(batch, {.seed = 1});
  fs::parallel::tensor_parallel tp(net, timed);
  fs::optim::trainer<network_t, fs::optim::adamw> trainer(net, {}, fs::optim::adamw_options{});
  const fs::host_executor ex{};
  trainer.initialize(ex);
  for (int s = 0; s < 3; ++s) trainer.step(images, labels, ex);  // untimed
  timed.seconds = timed.bytes = 0;
  timed.calls = 0;
  MPI_Barrier(world.native());
  const auto start = clock_type::now();
  for (int s = 0; s < steps; ++s) trainer.step(images, labels, ex);
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();

  double mine[2] = {seconds / steps, timed.seconds / steps};
  std::vector<double> all(std::size_t(2 * world.size()));
  world.all_gather(fs::view<double, fs::dextents<fs::index_t, 1>>(mine, 2),
                   fs::view<double, fs::dextents<fs::index_t, 1>>(all.data(), 2 * world.size()))
      .wait();
  if (world.rank() != 0) return;
  double slowest = 0, communication = 0;
  for (int r = 0; r < world.size(); ++r) {
    slowest = std::max(slowest, all[std::size_t(2 * r)]);
    communication += all[std::size_t(2 * r + 1)] / world.size();
  }
  std::printf("| %s | %d | %.1f | %.1f (%.0f%%) | %.1f | %.0f | %lld |\n", name, ways, 1e3 * slowest, 1e3 * communication,
              100 * communication / slowest, double(timed.calls) / steps, timed.bytes / steps / 1e3,
              (long long)net.parameter_count());
}

}  // namespace

int main(int argc, char** argv) {
  return fs::comm::run_ranks(argc, argv, [&](fs::comm::mpi& world) {
    int steps = 10;
    const bool go_on = fs::app::command_line("Tensor-parallel MLP steps over MPI ranks.")
        .number("--steps", steps, "timed steps", fs::app::at_least(1))
        .parse(argc, argv);  // false after --help; a mistake throws (run_ranks ends the job)
    if (!go_on) return 0;
    if (world.rank() == 0) {
      std::printf("| model | ranks | step ms | all-reduce ms (of step) | all-reduces a step | kB a step a rank | parameters a rank |\n");
      std::printf("|---|---|---|---|---|---|---|\n");
    }
    fs::parallel::dispatch_tensor_parallel<1, 2, 4, 8>(world.size(), {512, 4096}, [&]<int Ways>() {
      run<small_mlp<Ways>>(world, "784-512-256-10", Ways, steps);
      run<wide_mlp<Ways>>(world, "1024-4096-1024 x2 -10", Ways, steps);
    });
    return 0;
  });
}
