// bench/train_mlp_host.cpp — training-step throughput of an MLP on the host
// (issue 4): one optim::trainer::step (forward, softmax cross-entropy with its
// gradient, backward, gradient norm, AdamW) per iteration, fp32, in samples/s
// (items_per_second). bench/train_mlp_torch.py times the same models, batches
// and optimizer in PyTorch on the CPU and prints the two side by side.
//
// Models: 784-512-256-10 (the fashion_mnist_mlp example's) at batch 128 and
// 256, and 784-256-10 at batch 128; ReLU between layers. Inputs are standard
// normal (what a normalised image looks like to the network), labels uniform
// over the ten classes, both from fixed seeds; eight batches are cycled so a
// step does not always see the same memory.
//
// Two more benchmarks say where the time of a step goes:
//   fusor_step_phases     the trainer's step rebuilt from the same public pieces
//                         (checked to give the trainer's parameters bit for bit),
//                         with each phase timed: counters forward_ms, loss_ms,
//                         backward_ms, norm_ms (gradient norm + step decisions),
//                         adamw_ms, per step
//   openblas_step_gemms   only the step's eight matrix products, cblas_sgemm
//                         called directly: the floor under any host
//                         implementation that uses OpenBLAS (PyTorch here does)
//
// Threads: fusor's OpenMP passes use omp_get_max_threads(), OpenBLAS its own
// pthreads (openblas_get_num_threads()); both are printed in the context. Run
// with OMP_WAIT_POLICY=passive on a machine whose cores both share: spinning
// OpenMP threads otherwise steal the cores OpenBLAS's threads need (RESULTS.md).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

namespace {

namespace fs = fusor;
namespace nn = fusor::nn;
namespace optim = fusor::optim;

using mlp_784_512_256_10 = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu>,
                                          nn::linear<512, 256, nn::relu>, nn::linear<256, 10>>;
using mlp_784_256_10 = nn::sequential<nn::features<784>, nn::linear<784, 256, nn::relu>, nn::linear<256, 10>>;

template <class Model>
using network_t = nn::network<Model, fs::fp32, fs::host_space>;
template <class Model>
using trainer_t = optim::trainer<network_t<Model>, optim::adamw>;

// The optimizer of the comparison: torch.optim.AdamW(lr=1e-3, weight_decay=1e-4).
const optim::trainer_options trainer_settings{.schedule = optim::learning_rate_schedule::constant(1e-3f)};
const optim::adamw_options adamw_settings{.weight_decay = 1e-4f};

using image_batch = fs::tensor<float, fs::dextents<fs::index_t, 2>>;
using label_batch = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 1>>;

struct random_batches {
  static constexpr int count = 8;
  std::vector<image_batch> images;
  std::vector<label_batch> labels;
  random_batches(fs::index_t batch, fs::index_t features) {
    std::mt19937 engine(2026);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<std::int32_t> label(0, 9);
    for (int b = 0; b < count; ++b) {
      images.emplace_back(batch, features);
      labels.emplace_back(batch);
      for (fs::index_t i = 0; i < batch * features; ++i) images.back().data()[i] = normal(engine);
      for (fs::index_t i = 0; i < batch; ++i) labels.back().data()[i] = label(engine);
    }
  }
};

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

void report_samples(benchmark::State& state, fs::index_t batch) {
  state.SetItemsProcessed(state.iterations() * batch);
}

// One trainer.step per iteration: what fashion_mnist_mlp runs for every batch.
template <class Model>
void fusor_train_step(benchmark::State& state) {
  const fs::index_t batch = state.range(0);
  const fs::host_executor ex{};
  network_t<Model> net(batch, {.seed = 1});
  trainer_t<Model> trainer(net, trainer_settings, adamw_settings);
  trainer.initialize(ex);
  const random_batches data(batch, 784);
  trainer.step(data.images[0], data.labels[0], ex);  // first touch of every buffer
  trainer.loss().reset(ex);
  int k = 0;
  for (auto _ : state) {
    trainer.step(data.images[k], data.labels[k], ex);
    k = (k + 1) % random_batches::count;
  }
  // Random labels: the mean loss starts near ln 10 = 2.30 and must stay finite.
  const double loss = trainer.loss().totals().mean_loss;
  if (!std::isfinite(loss) || loss > 3.0) state.SkipWithError("the loss is not finite or grew past 3");
  state.counters["loss"] = loss;
  report_samples(state, batch);
}

// The trainer's step from the public pieces it is made of, each phase timed.
template <class Model>
struct step_by_phases {
  network_t<Model> net;
  nn::softmax_cross_entropy<fs::host_space> loss;
  optim::update_controller<fs::host_space> controller;
  optim::adamw<float, fs::host_space> adamw;
  std::array<double, 5> seconds{};  // forward, loss, backward, norm, adamw

  step_by_phases(fs::index_t batch, const fs::host_executor& ex)
      : net(batch, {.seed = 1}),
        loss(batch),
        controller(trainer_settings.schedule),
        adamw(net.template group<float>().size(), adamw_settings) {
    adamw.initialize(net.template group<float>().values(), ex);
  }
  void step(const image_batch& images, const label_batch& labels, const fs::host_executor& ex) {
    auto t = clock_type::now();
    const auto lap = [&](int phase) {
      seconds[phase] += seconds_since(t);
      t = clock_type::now();
    };
    const auto logits = net.forward(images, ex);
    lap(0);
    loss.forward_backward(logits, labels, net.output_gradient(), ex);
    lap(1);
    net.backward(ex);
    lap(2);
    controller.begin_step(ex);
    net.for_each_group([&](auto& group) { controller.accumulate_gradient_norm(group.gradients(), ex); });
    controller.prepare_update(ex);
    lap(3);
    auto& group = net.template group<float>();
    adamw.step(group.values(), group.gradients(), controller.scalars(), ex);
    controller.finish_step(ex);
    lap(4);
  }
};

// Whether the rebuilt step trains exactly as trainer::step does (three steps).
template <class Model>
bool same_as_trainer(fs::index_t batch, const random_batches& data, const fs::host_executor& ex) {
  step_by_phases<Model> phases(batch, ex);
  network_t<Model> net(batch, {.seed = 1});
  trainer_t<Model> trainer(net, trainer_settings, adamw_settings);
  trainer.initialize(ex);
  for (int k = 0; k < 3; ++k) {
    phases.step(data.images[k], data.labels[k], ex);
    trainer.step(data.images[k], data.labels[k], ex);
  }
  const auto a = phases.net.template group<float>().values(), b = net.template group<float>().values();
  return std::equal(a.data(), a.data() + a.size(), b.data());
}

template <class Model>
void fusor_step_phases(benchmark::State& state) {
  const fs::index_t batch = state.range(0);
  const fs::host_executor ex{};
  const random_batches data(batch, 784);
  if (!same_as_trainer<Model>(batch, data, ex)) {
    state.SkipWithError("the rebuilt step differs from trainer::step");
    return;
  }
  step_by_phases<Model> phases(batch, ex);
  phases.step(data.images[0], data.labels[0], ex);
  phases.seconds = {};
  int k = 0;
  for (auto _ : state) {
    phases.step(data.images[k], data.labels[k], ex);
    k = (k + 1) % random_batches::count;
  }
  const char* names[] = {"forward_ms", "loss_ms", "backward_ms", "norm_ms", "adamw_ms"};
  for (int p = 0; p < 5; ++p)
    state.counters[names[p]] = benchmark::Counter(phases.seconds[p] * 1e3, benchmark::Counter::kAvgIterations);
  report_samples(state, batch);
}

// The products of one step, row-major as the network stores them: forward
// y = x w^T per layer, backward dw = dy^T x per layer and dx = dy w for every
// layer but the first (nothing needs the gradient of the images).
void openblas_step_gemms(benchmark::State& state, std::vector<int> sizes) {
  const int batch = int(state.range(0));
  const std::size_t layers = sizes.size() - 1;
  std::mt19937 engine(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto filled = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& e : v) e = uniform(engine);
    return v;
  };
  std::vector<std::vector<float>> x, w, y, dw;
  for (std::size_t l = 0; l < layers; ++l) {
    x.push_back(filled(std::size_t(batch) * sizes[l]));
    w.push_back(filled(std::size_t(sizes[l + 1]) * sizes[l]));
    y.push_back(filled(std::size_t(batch) * sizes[l + 1]));
    dw.push_back(filled(std::size_t(sizes[l + 1]) * sizes[l]));
  }
  for (auto _ : state) {
    for (std::size_t l = 0; l < layers; ++l) {  // y [batch, out] = x [batch, in] w^T
      const int in = sizes[l], out = sizes[l + 1];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x[l].data(), in, w[l].data(), in,
                  0.0f, y[l].data(), out);
    }
    for (std::size_t l = layers; l-- > 0;) {
      const int in = sizes[l], out = sizes[l + 1];
      // dw [out, in] = dy^T x (dy lives in y's buffer here)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, batch, 1.0f, y[l].data(), out, x[l].data(), in,
                  0.0f, dw[l].data(), in);
      // dx [batch, in] = dy w, into the previous layer's output buffer
      if (l > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, in, out, 1.0f, y[l].data(), out, w[l].data(),
                    in, 0.0f, y[l - 1].data(), in);
    }
    benchmark::ClobberMemory();
  }
  report_samples(state, batch);
}

void configure(benchmark::internal::Benchmark* b, std::vector<std::int64_t> batches) {
  for (const auto batch : batches) b->Arg(batch);
  // The fastest repetition next to the median: on a shared machine another
  // process only ever adds time. Read it from real_time (the rate counters'
  // "min" aggregate is the slowest run).
  b->ArgName("batch")->UseRealTime()->Unit(benchmark::kMillisecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
#if defined(_OPENMP)
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
#endif
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  const char* wait_policy = std::getenv("OMP_WAIT_POLICY");
  benchmark::AddCustomContext("OMP_WAIT_POLICY", wait_policy ? wait_policy : "(unset: set it to passive)");
#if defined(__NO_MATH_ERRNO__)
  benchmark::AddCustomContext("math_errno", "off (-fno-math-errno)");
#else
  benchmark::AddCustomContext("math_errno", "on (the default: sqrt is not vectorised)");
#endif

  const std::vector<int> large{784, 512, 256, 10}, small{784, 256, 10};
  configure(benchmark::RegisterBenchmark("fusor_train_step/model:784-512-256-10", fusor_train_step<mlp_784_512_256_10>),
            {128, 256});
  configure(benchmark::RegisterBenchmark("fusor_train_step/model:784-256-10", fusor_train_step<mlp_784_256_10>), {128});
  configure(benchmark::RegisterBenchmark("fusor_step_phases/model:784-512-256-10", fusor_step_phases<mlp_784_512_256_10>),
            {128, 256});
  configure(benchmark::RegisterBenchmark("fusor_step_phases/model:784-256-10", fusor_step_phases<mlp_784_256_10>), {128});
  configure(benchmark::RegisterBenchmark("openblas_step_gemms/model:784-512-256-10", openblas_step_gemms, large),
            {128, 256});
  configure(benchmark::RegisterBenchmark("openblas_step_gemms/model:784-256-10", openblas_step_gemms, small), {128});

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
