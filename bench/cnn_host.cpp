// bench/cnn_host.cpp — the training step of examples/fashion_mnist_cnn.cpp's
// network on the host (issue 4): conv 1->32 3x3 pad 1, relu, 2x2 pool, conv
// 32->64 3x3 pad 1, relu, pool, flatten, linear 3136->128 relu, dropout 25%,
// linear 128->10; fp32, batch 128, AdamW (lr 1e-3, weight decay 1e-4).
//
//   fusor_cnn_train_step   one optim::trainer::step per iteration (forward,
//                          softmax cross-entropy, backward, AdamW): what the
//                          example runs for every batch; samples/s
//   fusor_cnn_layer        each layer alone (a network of that one layer) at
//                          the same batch: counters forward_ms, backward_ms
//                          (backward with the input gradient, as in the CNN
//                          for every layer but the first)
// bench/cnn_torch.py times the same step in PyTorch on the CPU.
//
// Threads: fusor's OpenMP passes use omp_get_max_threads(), OpenBLAS its own
// threads; run with OMP_WAIT_POLICY=passive where both share few cores
// (bench/RESULTS.md, matmul section).
#include <algorithm>
#include <chrono>
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

#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/dropout.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/max_pool2d.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

namespace {

namespace fs = fusor;
namespace nn = fusor::nn;
namespace optim = fusor::optim;

using cnn = nn::sequential<nn::features<1, 28, 28>, nn::conv2d<1, 32, 3, 1, 1>, nn::relu, nn::max_pool2d<2>,
                           nn::conv2d<32, 64, 3, 1, 1>, nn::relu, nn::max_pool2d<2>, nn::flatten,
                           nn::linear<3136, 128, nn::relu>, nn::dropout<25>, nn::linear<128, 10>>;

using image_batch = fs::tensor<float, fs::dextents<fs::index_t, 2>>;
using label_batch = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 1>>;

// Eight batches of standard normal images and uniform labels, cycled.
struct random_batches {
  static constexpr int count = 8;
  std::vector<image_batch> images;
  std::vector<label_batch> labels;
  explicit random_batches(fs::index_t batch) {
    std::mt19937 engine(2026);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<std::int32_t> label(0, 9);
    for (int b = 0; b < count; ++b) {
      images.emplace_back(batch, 784);
      labels.emplace_back(batch);
      for (fs::index_t i = 0; i < batch * 784; ++i) images.back().data()[i] = normal(engine);
      for (fs::index_t i = 0; i < batch; ++i) labels.back().data()[i] = label(engine);
    }
  }
};

void fusor_cnn_train_step(benchmark::State& state) {
  const fs::index_t batch = state.range(0);
  const fs::host_executor ex{};
  nn::network<cnn, fs::fp32, fs::host_space> net(batch, {.seed = 1});
  optim::trainer<decltype(net), optim::adamw> trainer(
      net, {.schedule = optim::learning_rate_schedule::constant(1e-3f)}, optim::adamw_options{.weight_decay = 1e-4f});
  trainer.initialize(ex);
  const random_batches data(batch);
  trainer.step(data.images[0], data.labels[0], ex);  // first touch of every buffer
  int k = 0;
  for (auto _ : state) {
    trainer.step(data.images[k], data.labels[k], ex);
    k = (k + 1) % random_batches::count;
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

// One layer of the CNN as a network of its own, forward and backward timed apart.
template <class Input, class Layer>
void fusor_cnn_layer(benchmark::State& state) {
  using net_t = nn::network<nn::sequential<Input, Layer>, fs::fp32, fs::host_space>;
  using batched = typename Input::batched_extents;
  const fs::index_t batch = state.range(0);
  const fs::host_executor ex{};
  net_t net(batch, {.seed = 1});
  fs::tensor<float, batched> x{batched{batch}}, dx{batched{batch}};
  std::mt19937 engine(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (fs::index_t i = 0; i < x.size(); ++i) x.data()[i] = normal(engine);
  const auto y = net.forward(x, ex);
  for (fs::index_t i = 0; i < y.size(); ++i) net.output_gradient().data()[i] = normal(engine);
  double forward = 0, backward = 0;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    net.forward(x, ex, nn::run_mode{true, 1});
    auto middle = std::chrono::steady_clock::now();
    net.backward(ex, typename net_t::input_view(dx.data(), batch));
    auto end = std::chrono::steady_clock::now();
    forward += std::chrono::duration<double, std::milli>(middle - start).count();
    backward += std::chrono::duration<double, std::milli>(end - middle).count();
  }
  state.counters["forward_ms"] = benchmark::Counter(forward, benchmark::Counter::kAvgIterations);
  state.counters["backward_ms"] = benchmark::Counter(backward, benchmark::Counter::kAvgIterations);
}

void configure(benchmark::internal::Benchmark* b) {
  // The fastest repetition next to the median: on a shared machine another
  // process only ever adds time.
  b->Arg(128)->ArgName("batch")->UseRealTime()->Unit(benchmark::kMillisecond);
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

  configure(benchmark::RegisterBenchmark("fusor_cnn_train_step", fusor_cnn_train_step));
  using nn::features;
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/conv2d<1,32,3,1,1>",
                                         fusor_cnn_layer<features<1, 28, 28>, nn::conv2d<1, 32, 3, 1, 1>>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/relu(32x28x28)", fusor_cnn_layer<features<32, 28, 28>, nn::relu>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/max_pool2d<2>(32x28x28)",
                                         fusor_cnn_layer<features<32, 28, 28>, nn::max_pool2d<2>>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/conv2d<32,64,3,1,1>",
                                         fusor_cnn_layer<features<32, 14, 14>, nn::conv2d<32, 64, 3, 1, 1>>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/relu(64x14x14)", fusor_cnn_layer<features<64, 14, 14>, nn::relu>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/max_pool2d<2>(64x14x14)",
                                         fusor_cnn_layer<features<64, 14, 14>, nn::max_pool2d<2>>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/flatten(64x7x7)", fusor_cnn_layer<features<64, 7, 7>, nn::flatten>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/linear<3136,128,relu>",
                                         fusor_cnn_layer<features<3136>, nn::linear<3136, 128, nn::relu>>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/dropout<25>(128)", fusor_cnn_layer<features<128>, nn::dropout<25>>));
  configure(benchmark::RegisterBenchmark("fusor_cnn_layer/linear<128,10>", fusor_cnn_layer<features<128>, nn::linear<128, 10>>));

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
