// bench/bench_attention_host.cpp — causal self-attention on the host
// (kernels/attention.hpp): forward, and forward + backward, at a GPT block's
// shapes — batch 4, 6 heads of 64 columns, T = 256, fp32 — on 1 and 2 OpenMP
// threads. bench/attention_pytorch.py times PyTorch's CPU attention on the same
// shapes and threads, and sets the two side by side (--fusor FILE).
//
// FLOP/s counts the work causal attention needs, as FlashAttention does:
// 4 B H T^2 D / 2 for the forward (two products, the upper triangle skipped)
// and 2.5 times that for the backward (five products), so forward + backward
// is 3.5 times the forward. The output is checked once before timing (the
// first position attends to itself alone: y = v there; dqkv finite), so a
// fast wrong answer fails instead of winning.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "fusor/core/tensor.hpp"
#include "fusor/kernels/attention.hpp"

namespace {

constexpr fusor::index_t batch = 4, heads = 6, head_dim = 64;
using cube = fusor::tensor<float, fusor::dextents<fusor::index_t, 3>>;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench_attention_host: wrong result: %s\n", what);
    std::exit(1);
  }
}

struct operands {
  fusor::index_t time;
  cube qkv, y, lse, dy, dqkv;
  explicit operands(fusor::index_t t)
      : time(t),
        qkv(batch, t, 3 * heads * head_dim),
        y(batch, t, heads * head_dim),
        lse(batch, heads, t),
        dy(batch, t, heads * head_dim),
        dqkv(batch, t, 3 * heads * head_dim) {
    std::mt19937 engine(1);
    std::uniform_real_distribution<float> uniform(-1.5f, 1.5f);
    for (fusor::index_t i = 0; i < qkv.size(); ++i) qkv.data()[i] = uniform(engine);
    for (fusor::index_t i = 0; i < dy.size(); ++i) dy.data()[i] = uniform(engine);
  }
  void check_forward() const {
    for (fusor::index_t x = 0; x < heads * head_dim; ++x)
      require(std::fabs(y(0, 0, x) - qkv(0, 0, 2 * heads * head_dim + x)) < 1e-5f, "y at the first position");
  }
  void check_backward() const {
    for (fusor::index_t i = 0; i < dqkv.size(); ++i) require(std::isfinite(dqkv.data()[i]), "dqkv finite");
  }
};

double forward_flops(fusor::index_t time) { return 4.0 * batch * heads * double(time) * double(time) * head_dim / 2; }

void report(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_iteration * double(state.iterations()), benchmark::Counter::kIsRate);
}

void attention_forward(benchmark::State& state) {
  operands o(state.range(0));
  const fusor::host_executor ex{int(state.range(1))};
  const fusor::attention_heads shape{heads};
  fusor::causal_attention(o.y, o.lse, o.qkv, shape, ex);
  o.check_forward();
  for (auto _ : state) {
    fusor::causal_attention(o.y, o.lse, o.qkv, shape, ex);
    benchmark::ClobberMemory();
  }
  report(state, forward_flops(o.time));
}

void attention_forward_backward(benchmark::State& state) {
  operands o(state.range(0));
  const fusor::host_executor ex{int(state.range(1))};
  const fusor::attention_heads shape{heads};
  for (auto _ : state) {
    fusor::causal_attention(o.y, o.lse, o.qkv, shape, ex);
    fusor::causal_attention_backward(o.dqkv, o.dy, o.qkv, o.y, o.lse, shape, ex);
    benchmark::ClobberMemory();
  }
  o.check_forward();
  o.check_backward();
  report(state, 3.5 * forward_flops(o.time));
}

void shapes(benchmark::internal::Benchmark* b) {
  for (const int threads : {1, 2}) b->Args({256, threads});
  // The fastest repetition next to the median: on a shared machine another
  // process only ever adds time. Read it from real_time.
  b->ArgNames({"T", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

}  // namespace

BENCHMARK(attention_forward)->Apply(shapes);
BENCHMARK(attention_forward_backward)->Apply(shapes);

BENCHMARK_MAIN();
