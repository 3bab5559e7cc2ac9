// bench/host_fusion.cpp — what fusing elementwise work into one loop buys on
// the host, against the same work as separate passes and against Eigen.
//
// One expression of six elementwise operations over three float inputs
// (and, at the end, a backward pass derived at compile time):
//
//   out = (a * b + c) * 0.5f - (a - c) * b
//
// Every variant computes exactly that. Bytes processed per element are 16
// (three 4-byte inputs read, one 4-byte output written), whatever the variant
// really moves: the unfused variant moves 68 bytes per element (six passes over
// 17 arrays in all) to produce the same 16, which is the point of fusing.
// "mem_bytes_per_second" reports what each variant really moves.
//
// Eigen evaluates Array expressions lazily into one loop too, so it is the
// peer of fusor's fused pass. Eigen does not parallelise coefficient-wise
// expressions (its OpenMP support covers matrix products only), so it runs
// single-threaded in every comparison.
#include <cmath>
#include <cstdio>
#include <random>

#include <Eigen/Core>
#include <benchmark/benchmark.h>

#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/derivative.hpp"
#include "fusor/expr/host_math.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/expr/substitute.hpp"

namespace {

using vector = fusor::tensor<float, fusor::extents<int, fusor::dynamic>>;
using eigen_map = Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>;

constexpr int log2_elements = 24;
constexpr int elements = 1 << log2_elements;
constexpr double useful_bytes_per_element = 4.0 * sizeof(float);     // a, b, c read; out written
constexpr double unfused_bytes_per_element = 17.0 * sizeof(float);  // see unfused_passes

// Inputs and outputs shared by every benchmark, allocated and touched once.
struct workload {
  vector a{elements}, b{elements}, c{elements}, out{elements};
  vector t1{elements}, t2{elements}, t3{elements}, t4{elements}, t5{elements};

  workload() {
    std::mt19937 engine(2026);
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    for (int i = 0; i < elements; ++i) {
      a.data()[i] = uniform(engine);
      b.data()[i] = uniform(engine);
      c.data()[i] = uniform(engine);
    }
    for (vector* t : {&out, &t1, &t2, &t3, &t4, &t5})
      for (int i = 0; i < elements; ++i) t->data()[i] = 0.0f;
  }

  static workload& get() {
    static workload w;
    return w;
  }

  // Zeroes the output, so a variant that does nothing cannot pass for a correct one.
  void clear_output() {
    for (int i = 0; i < elements; ++i) out.data()[i] = 0.0f;
  }
  // Whether out holds the expression's value (exactly: every variant rounds the
  // same operations in the same order, and FMA contraction stays within 1e-5).
  bool output_is_correct() const {
    for (int i = 0; i < elements; ++i) {
      const float x = a.data()[i], y = b.data()[i], z = c.data()[i];
      const float expected = (x * y + z) * 0.5f - (x - z) * y;
      if (std::fabs(out.data()[i] - expected) > 1e-5f * (1.0f + std::fabs(expected))) {
        std::fprintf(stderr, "element %d: got %g, expected %g\n", i, out.data()[i], expected);
        return false;
      }
    }
    return true;
  }
};

void report(benchmark::State& state, double bytes_per_element) {
  workload& w = workload::get();
  if (!w.output_is_correct()) state.SkipWithError("wrong result");
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(useful_bytes_per_element * elements));
  state.counters["mem_bytes_per_second"] =
      benchmark::Counter(double(state.iterations()) * bytes_per_element * elements, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

// ---- the variants -----------------------------------------------------------------

// fusor: one assignment, one loop.
void fused(benchmark::State& state, int threads) {
  workload& w = workload::get();
  w.clear_output();
  const fusor::host_executor executor{.threads = threads};
  const auto &a = w.a, &b = w.b, &c = w.c;
  for (auto _ : state) {
    fusor::assign(w.out, (a * b + c) * 0.5f - (a - c) * b, executor);
    benchmark::ClobberMemory();
  }
  report(state, useful_bytes_per_element);
}

// fusor: the same six operations as six assignments through temporaries, as an
// eager library would run them. Arrays touched: 3 + 3 + 2 + 3 + 3 + 3 = 17.
void unfused(benchmark::State& state, int threads) {
  workload& w = workload::get();
  w.clear_output();
  const fusor::host_executor executor{.threads = threads};
  const auto &a = w.a, &b = w.b, &c = w.c;
  for (auto _ : state) {
    fusor::assign(w.t1, a * b, executor);
    fusor::assign(w.t2, w.t1 + c, executor);
    fusor::assign(w.t3, w.t2 * 0.5f, executor);
    fusor::assign(w.t4, a - c, executor);
    fusor::assign(w.t5, w.t4 * b, executor);
    fusor::assign(w.out, w.t3 - w.t5, executor);
    benchmark::ClobberMemory();
  }
  report(state, unfused_bytes_per_element);
}

// Eigen 3.4: an Array expression, evaluated lazily into one vectorised loop.
void eigen(benchmark::State& state) {
  workload& w = workload::get();
  w.clear_output();
  const eigen_map a(w.a.data(), elements), b(w.b.data(), elements), c(w.c.data(), elements);
  eigen_map out(w.out.data(), elements);
  for (auto _ : state) {
    out = (a * b + c) * 0.5f - (a - c) * b;
    benchmark::ClobberMemory();
  }
  report(state, useful_bytes_per_element);
}

// A plain loop over raw pointers: what a hand-written kernel reaches, for scale.
void handwritten(benchmark::State& state, int threads) {
  workload& w = workload::get();
  w.clear_output();
  const float* __restrict a = w.a.data();
  const float* __restrict b = w.b.data();
  const float* __restrict c = w.c.data();
  float* __restrict out = w.out.data();
  for (auto _ : state) {
#if defined(_OPENMP)
// `if (parallel: ...)`: a bare if clause would switch off the simd part too.
#pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel : threads > 1)
#endif
    for (int i = 0; i < elements; ++i) out[i] = (a[i] * b[i] + c[i]) * 0.5f - (a[i] - c[i]) * b[i];
    benchmark::ClobberMemory();
  }
  (void)threads;
  report(state, useful_bytes_per_element);
}

// ---- a derived backward pass ---------------------------------------------------------
// dx = gelu_tanh'(x) dy with x = a and dy = b: fusor's compile-time derivative
// (a derivative node, ops::gelu_tanh_slope, evaluating tanh once) against a
// hand-written loop of the same formula with the same vectorisable tanh
// (expr/host_math.hpp; libm's tanhf would keep the loop scalar). 12 bytes an
// element: two inputs read, one output written.
constexpr double gelu_bytes_per_element = 3.0 * sizeof(float);

// gelu_tanh'(x) dy in double, with std::tanh.
double gelu_backward_reference(double x, double dy) {
  const double k = 0.79788456080286535588, c = 0.044715, t = std::tanh(k * (x + c * x * x * x));
  return (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x)) * dy;
}

void report_gelu(benchmark::State& state) {
  workload& w = workload::get();
  for (int i = 0; i < elements; ++i) {
    const double want = gelu_backward_reference(w.a.data()[i], w.b.data()[i]);
    if (std::fabs(w.out.data()[i] - want) > 1e-5 * (1.0 + std::fabs(want))) {
      std::fprintf(stderr, "element %d: got %g, expected %g\n", i, w.out.data()[i], want);
      state.SkipWithError("wrong result");
      break;
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(gelu_bytes_per_element * elements));
}

void gelu_backward_derived(benchmark::State& state, int threads) {
  workload& w = workload::get();
  w.clear_output();
  const fusor::host_executor executor{.threads = threads};
  const auto slope = fusor::derivative(fusor::gelu_tanh(fusor::arg<0>), fusor::arg<0>);
  for (auto _ : state) {
    fusor::assign(w.out, fusor::substitute(slope, w.a) * w.b, executor);
    benchmark::ClobberMemory();
  }
  report_gelu(state);
}

void gelu_backward_handwritten(benchmark::State& state, int threads) {
  workload& w = workload::get();
  w.clear_output();
  const float* __restrict x = w.a.data();
  const float* __restrict dy = w.b.data();
  float* __restrict dx = w.out.data();
  for (auto _ : state) {
#if defined(_OPENMP)
#pragma omp parallel for simd num_threads(threads) schedule(static) if (parallel : threads > 1)
#endif
    for (int i = 0; i < elements; ++i) {
      const float k = 0.79788456080286535588f, c = 0.044715f, x2 = x[i] * x[i];
      const float t = fusor::detail::host_tanh(k * (x[i] + c * x2 * x[i]));
      dx[i] = (0.5f * (1.0f + t) + 0.5f * x[i] * (1.0f - t * t) * k * (1.0f + 3.0f * c * x2)) * dy[i];
    }
    benchmark::ClobberMemory();
  }
  (void)threads;
  report_gelu(state);
}

void arguments(benchmark::internal::Benchmark* b) { b->Unit(benchmark::kMillisecond)->UseRealTime(); }

BENCHMARK_CAPTURE(fused, threads_1, 1)->Apply(arguments);
BENCHMARK_CAPTURE(unfused, threads_1, 1)->Apply(arguments);
BENCHMARK(eigen)->Apply(arguments);
BENCHMARK_CAPTURE(handwritten, threads_1, 1)->Apply(arguments);
BENCHMARK_CAPTURE(gelu_backward_derived, threads_1, 1)->Apply(arguments);
BENCHMARK_CAPTURE(gelu_backward_handwritten, threads_1, 1)->Apply(arguments);
#if defined(_OPENMP)  // without OpenMP every pass runs on one thread
BENCHMARK_CAPTURE(fused, threads_2, 2)->Apply(arguments);
BENCHMARK_CAPTURE(unfused, threads_2, 2)->Apply(arguments);
BENCHMARK_CAPTURE(handwritten, threads_2, 2)->Apply(arguments);
#endif

}  // namespace

BENCHMARK_MAIN();
