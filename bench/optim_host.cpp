// bench/optim_host.cpp — one AdamW step on the host over 10M parameters:
// fusor's fused pass (optim::adamw, its learning rate, multiplier and skip
// flag read from step_scalars in memory, as a captured GPU step must) against
// a hand-written `omp simd` loop taking the same scalars as arguments, 1 and 2
// threads; fp32 parameters, and bf16 parameters with fp32 master weights.
//
// Bytes processed per element: fp32: read p, g, m, v and write p, m, v (28);
// bf16: read g (2), m, v, master and write m, v, master, p (2): also 28.
// Before timing, each variant's one step from the same state is checked
// against the other's (relative 1e-5; bf16 parameters 1e-2, one rounding), so
// a fast wrong answer fails. bench/optim.cmake builds this file twice, as
// bench_optim_host and bench_optim_host_no_errno (-fno-math-errno): GCC
// vectorises neither loop while sqrt may have to set errno.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "fusor/optim/adamw.hpp"
#include "fusor/optim/update_controller.hpp"

namespace {

namespace optim = fusor::optim;
using fusor::index_t;
template <class T>
using flat = fusor::tensor<T, fusor::dextents<index_t, 1>>;

constexpr index_t parameters = 10'000'000;
constexpr float learning_rate = 1e-3f;
const optim::adamw_options options{};

template <class T>
flat<T> random_flat(std::uint32_t seed, float low, float high) {
  flat<T> t(parameters);
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  for (index_t i = 0; i < parameters; ++i) t.data()[i] = fusor::convert<T>(uniform(engine));
  return t;
}

fusor::host_executor on(int threads) { return fusor::host_executor{.threads = threads}; }

// The loop a programmer would write: the step's factors computed on the host.
template <class P>
void loop_adamw(P* params, float* master, const P* grads, float* m, float* v, index_t step, int threads) {
  const double t = double(step + 1);
  const float step_size = float(learning_rate / (1.0 - std::pow(double(options.beta1), t)));
  const float inverse_sqrt_correction2 = float(1.0 / std::sqrt(1.0 - std::pow(double(options.beta2), t)));
  const float decay = 1.0f - learning_rate * options.weight_decay;
  const float b1 = options.beta1, b2 = options.beta2, c1 = 1.0f - b1, c2 = 1.0f - b2, eps = options.epsilon;
#pragma omp parallel for simd num_threads(threads) schedule(static)
  for (index_t i = 0; i < parameters; ++i) {
    const float g = fusor::convert<float>(grads[i]);
    const float mi = b1 * m[i] + c1 * g, vi = b2 * v[i] + c2 * (g * g);
    m[i] = mi, v[i] = vi;
    const float w = master[i] * decay - step_size * mi / (std::sqrt(vi) * inverse_sqrt_correction2 + eps);
    master[i] = w;
    params[i] = fusor::convert<P>(w);
  }
}

template <class P>
struct workload {
  static constexpr bool master = !std::is_same_v<P, float>;
  flat<P> params = random_flat<P>(1, -1.0f, 1.0f), grads = random_flat<P>(2, -2.0f, 2.0f);
  flat<float> master_weights{master ? parameters : 0}, m{parameters}, v{parameters};
  optim::update_controller<fusor::host_space> controller{optim::learning_rate_schedule::constant(learning_rate)};
  optim::adamw<P> fused{parameters, options};

  workload() {
    for (index_t i = 0; i < parameters; ++i) {
      m.data()[i] = 0.0f, v.data()[i] = 0.0f;
      if constexpr (master) master_weights.data()[i] = fusor::convert<float>(params.data()[i]);
    }
    fused.initialize(params.view(), on(0));
    controller.begin_step(on(0));
    controller.prepare_update(on(0));  // learning rate and multiplier stay as they are for every step
  }
  float* loop_master() { return master ? master_weights.data() : reinterpret_cast<float*>(params.data()); }
};

// One step of each from the same start; the results must agree.
template <class P>
bool agree() {
  workload<P> a;
  a.fused.step(a.params.view(), a.grads.view(), a.controller.scalars(), on(0));
  workload<P> b;
  loop_adamw(b.params.data(), b.loop_master(), b.grads.data(), b.m.data(), b.v.data(), 0, 2);
  for (index_t i = 0; i < parameters; i += 997) {
    const double x = fusor::convert<double>(a.params.data()[i]), y = fusor::convert<double>(b.params.data()[i]);
    if (std::fabs(x - y) > 1e-5 * std::max(1.0, std::fabs(y)) && !std::is_same_v<P, fusor::bfloat16>) return false;
    if (std::is_same_v<P, fusor::bfloat16> && std::fabs(x - y) > 1e-2 * std::max(1.0, std::fabs(y))) return false;
  }
  return true;
}

template <class P>
void fusor_adamw(benchmark::State& state, int threads) {
  if (!agree<P>()) return state.SkipWithError("fusor and the loop disagree");
  workload<P> w;
  const auto ex = on(threads);
  for (auto _ : state) {
    w.fused.step(w.params.view(), w.grads.view(), w.controller.scalars(), ex);
    benchmark::DoNotOptimize(w.params.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * 28 * parameters);
}

template <class P>
void loop_adamw_bench(benchmark::State& state, int threads) {
  workload<P> w;
  index_t step = 0;
  for (auto _ : state) {
    loop_adamw(w.params.data(), w.loop_master(), w.grads.data(), w.m.data(), w.v.data(), step++, threads);
    benchmark::DoNotOptimize(w.params.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * 28 * parameters);
}

void fusor_fp32(benchmark::State& state, int threads) { fusor_adamw<float>(state, threads); }
void loop_fp32(benchmark::State& state, int threads) { loop_adamw_bench<float>(state, threads); }
void fusor_bf16_master(benchmark::State& state, int threads) { fusor_adamw<fusor::bfloat16>(state, threads); }
void loop_bf16_master(benchmark::State& state, int threads) { loop_adamw_bench<fusor::bfloat16>(state, threads); }

}  // namespace

#define FUSOR_OPTIM_BENCH(function, threads) \
  BENCHMARK_CAPTURE(function, threads_##threads, threads)->Unit(benchmark::kMillisecond)->UseRealTime()
FUSOR_OPTIM_BENCH(fusor_fp32, 1);
FUSOR_OPTIM_BENCH(loop_fp32, 1);
FUSOR_OPTIM_BENCH(fusor_fp32, 2);
FUSOR_OPTIM_BENCH(loop_fp32, 2);
FUSOR_OPTIM_BENCH(fusor_bf16_master, 1);
FUSOR_OPTIM_BENCH(loop_bf16_master, 1);
FUSOR_OPTIM_BENCH(fusor_bf16_master, 2);
FUSOR_OPTIM_BENCH(loop_bf16_master, 2);

BENCHMARK_MAIN();
