// bench/rowwise_host.cpp — host throughput of the row-wise kernels (softmax,
// layernorm, forward and backward) under fusor's host executor, on 1 and 2
// OpenMP threads. bench/rowwise_torch.py times PyTorch's CPU kernels on the
// same shapes; bench/RESULTS.md sets the two side by side.
//
// Shapes are [rows, n] fp32 with 2^22 elements (16 MiB per array): 4096 x 1024,
// 1024 x 4096 and 128 x 32768. "bytes_per_second" counts the arrays a kernel
// must read and write once (softmax: x read, y written, 8 bytes per element;
// layernorm forward the same plus weight, bias and the per-row statistics;
// backward: the two inputs read and dx written, 12 bytes per element), and
// "items_per_second" counts elements. Every kernel's output is checked once
// before timing, so a fast wrong answer fails instead of winning.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "fusor/core/tensor.hpp"
#include "fusor/kernels/layernorm.hpp"
#include "fusor/kernels/softmax.hpp"

namespace {

using matrix = fusor::tensor<float, fusor::dextents<fusor::index_t, 2>>;
using vector = fusor::tensor<float, fusor::dextents<fusor::index_t, 1>>;

void fill(float* data, fusor::index_t n, unsigned seed, float low, float high) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  for (fusor::index_t i = 0; i < n; ++i) data[i] = uniform(engine);
}

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "rowwise_host: wrong result: %s\n", what);
    std::exit(1);
  }
}

struct operands {
  fusor::index_t rows, n;
  matrix x, y, dy, dx;
  vector weight, bias, mean, rstd, dweight, dbias;
  operands(fusor::index_t r, fusor::index_t c)
      : rows(r), n(c), x(r, c), y(r, c), dy(r, c), dx(r, c), weight(c), bias(c), mean(r), rstd(r), dweight(c),
        dbias(c) {
    fill(x.data(), r * c, 1, -4.0f, 4.0f);
    fill(dy.data(), r * c, 2, -1.0f, 1.0f);
    fill(weight.data(), c, 3, 0.5f, 1.5f);
    fill(bias.data(), c, 4, -1.0f, 1.0f);
    fill(y.data(), r * c, 5, 0.0f, 1.0f);
  }
};

fusor::host_executor executor_for(const benchmark::State& state) { return {int(state.range(2))}; }

void report(benchmark::State& state, double bytes_per_element) {
  const double elements = double(state.range(0)) * double(state.range(1));
  state.SetItemsProcessed(int64_t(state.iterations() * elements));
  state.SetBytesProcessed(int64_t(double(state.iterations()) * elements * bytes_per_element));
}

void softmax_forward(benchmark::State& state) {
  operands o(state.range(0), state.range(1));
  const auto ex = executor_for(state);
  fusor::softmax(o.y, o.x, ex);
  double first_row = 0;
  for (fusor::index_t j = 0; j < o.n; ++j) first_row += o.y(0, j);
  require(std::fabs(first_row - 1) < 1e-4, "softmax row sum");
  for (auto _ : state) {
    fusor::softmax(o.y, o.x, ex);
    benchmark::ClobberMemory();
  }
  report(state, 8);
}

void softmax_backward(benchmark::State& state) {
  operands o(state.range(0), state.range(1));
  const auto ex = executor_for(state);
  fusor::softmax(o.y, o.x, ex);
  for (auto _ : state) {
    fusor::softmax_backward(o.dx, o.y, o.dy, ex);
    benchmark::ClobberMemory();
  }
  double sum = 0;  // sum over a row of y * (dy - sum(dy * y)) is 0
  for (fusor::index_t j = 0; j < o.n; ++j) sum += o.dx(0, j);
  require(std::fabs(sum) < 1e-4, "softmax_backward row sum");
  report(state, 12);
}

void layernorm_forward(benchmark::State& state) {
  operands o(state.range(0), state.range(1));
  const auto ex = executor_for(state);
  for (auto _ : state) {
    fusor::layernorm(o.y, o.mean, o.rstd, o.x, o.weight, o.bias, {}, ex);
    benchmark::ClobberMemory();
  }
  double mean = 0;
  for (fusor::index_t j = 0; j < o.n; ++j) mean += o.x(0, j);
  require(std::fabs(mean / double(o.n) - o.mean(0)) < 1e-4, "layernorm mean");
  report(state, 8);
}

void layernorm_backward(benchmark::State& state) {
  operands o(state.range(0), state.range(1));
  const auto ex = executor_for(state);
  fusor::layernorm(o.y, o.mean, o.rstd, o.x, o.weight, o.bias, {}, ex);
  for (auto _ : state) {
    fusor::layernorm_backward(o.dx, o.dweight, o.dbias, o.dy, o.x, o.weight, o.mean, o.rstd, ex);
    benchmark::ClobberMemory();
  }
  double dbias = 0;
  for (fusor::index_t r = 0; r < o.rows; ++r) dbias += o.dy(r, 0);
  require(std::fabs(dbias - o.dbias(0)) < 1e-3, "layernorm_backward dbias");
  report(state, 12);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (const int threads : {1, 2})
    for (const auto& [rows, n] : {std::pair{4096, 1024}, std::pair{1024, 4096}, std::pair{128, 32768}})
      b->Args({rows, n, threads});
  // The fastest repetition next to the median: on a shared machine another
  // process only ever adds time (a 2-thread team with one core taken is 5-8x
  // slower). Read it from real_time: the rate counters' "min" is the slowest run.
  b->ArgNames({"rows", "n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

}  // namespace

BENCHMARK(softmax_forward)->Apply(shapes);
BENCHMARK(softmax_backward)->Apply(shapes);
BENCHMARK(layernorm_forward)->Apply(shapes);
BENCHMARK(layernorm_backward)->Apply(shapes);

BENCHMARK_MAIN();
