// bench/matmul_host.cpp — fusor's host matmul against OpenBLAS called directly
// (target: within 5%), on a Linear layer's product y = x w^T (x [m, k]
// row-major, w [n, k] row-major, read through transpose()), fp32.
//
// fusor turns the layouts into one cblas_sgemm call (column-major, operands
// swapped, the transposes from the strides); the peer calls cblas_sgemm itself
// the way a C programmer would (CblasRowMajor, NoTrans, Trans). Also timed,
// for the record: bf16 operands (converted to fp32 in one pass each, then
// sgemm, then one pass that rounds to bf16), and bias + gelu_tanh fused into the
// product's one pass versus sgemm followed by a separate fusor assignment, and
// a weight gradient with and without its bias gradient (dy's column sums).
// Every variant checks a few elements of its output against a double loop.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "fusor/core/strided_views.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/matmul.hpp"

namespace {

using matrix = fusor::dextents<fusor::index_t, 2>;
using vector = fusor::dextents<fusor::index_t, 1>;

template <class T>
struct linear_problem {
  fusor::index_t m, n, k;
  fusor::tensor<T, matrix> x, w, y;
  fusor::tensor<T, vector> bias;
  linear_problem(fusor::index_t m_, fusor::index_t n_, fusor::index_t k_)
      : m(m_), n(n_), k(k_), x(m_, k_), w(n_, k_), y(m_, n_), bias(n_) {
    std::mt19937 rng(2026);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (auto* t : {&x, &w, &y})
      for (fusor::index_t i = 0; i < t->size(); ++i) t->data()[i] = fusor::convert<T>(uniform(rng));
    for (fusor::index_t i = 0; i < n; ++i) bias.data()[i] = fusor::convert<T>(uniform(rng));
  }
  // y(i, j) against sum_k x(i, k) w(j, k) (+ bias, through act) in double, at a few places.
  template <class Act>
  bool check(bool with_bias, Act act, double tolerance) const {
    for (fusor::index_t i = 0; i < m; i += 1 + m / 7)
      for (fusor::index_t j = 0; j < n; j += 1 + n / 5) {
        double sum = with_bias ? fusor::convert<double>(bias.data()[j]) : 0.0, scale = 1;
        for (fusor::index_t q = 0; q < k; ++q) {
          const double p = fusor::convert<double>(x.data()[i * k + q]) * fusor::convert<double>(w.data()[j * k + q]);
          sum += p;
          scale += std::fabs(p);
        }
        if (std::fabs(fusor::convert<double>(y.data()[i * n + j]) - act(sum)) > tolerance * scale) return false;
      }
    return true;
  }
  bool check() const {
    return check(false, [](double v) { return v; }, sizeof(T) == 4 ? 1e-5 : 1e-2);
  }
};

double gelu_tanh(double v) { return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

void report(benchmark::State& state, fusor::index_t m, fusor::index_t n, fusor::index_t k, bool ok) {
  // FLOP/s, printed with an SI prefix (G/s).
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * double(m) * double(n) * double(k), benchmark::Counter::kIsIterationInvariantRate);
  if (!ok) state.SkipWithError("wrong result");
}

void fusor_sgemm(benchmark::State& state) {
  linear_problem<float> p(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    fusor::matmul(p.y, p.x, fusor::transpose(p.w.view()));
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, p.check());
}

void openblas_sgemm(benchmark::State& state) {
  linear_problem<float> p(state.range(0), state.range(1), state.range(2));
  const int m = int(p.m), n = int(p.n), k = int(p.k);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, p.x.data(), k, p.w.data(), k, 0.0f,
                p.y.data(), n);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, p.check());
}

void fusor_bf16(benchmark::State& state) {
  linear_problem<fusor::bfloat16> p(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    fusor::matmul(p.y, p.x, fusor::transpose(p.w.view()));
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, p.check());
}

void fusor_bias_gelu_fused(benchmark::State& state) {
  linear_problem<float> p(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    fusor::matmul(p.y, p.x, fusor::transpose(p.w.view()), fusor::epilogue::gelu_tanh(p.bias));
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, p.check(true, gelu_tanh, 1e-5));
}

void fusor_bias_gelu_separate(benchmark::State& state) {
  linear_problem<float> p(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    fusor::matmul(p.y, p.x, fusor::transpose(p.w.view()));
    fusor::assign(p.y, fusor::gelu_tanh(p.y + p.bias));
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, p.check(true, gelu_tanh, 1e-5));
}

// A Linear layer's weight gradient dw = dy^T x (dy = y [m, n], x [m, k], dw = w
// [n, k]), alone or with its bias gradient db = the column sums of dy (bias)
// as the epilogue: the difference is what the sums cost. Checks dw and db at a
// few places against double sums.
bool weight_gradient_check(const linear_problem<float>& p, bool with_bias) {
  for (fusor::index_t j = 0; j < p.n; j += 1 + p.n / 7) {
    double db = 0, db_scale = 0;
    for (fusor::index_t i = 0; i < p.m; ++i) {
      db += p.y.data()[i * p.n + j];
      db_scale += std::fabs(p.y.data()[i * p.n + j]);
    }
    if (with_bias && std::fabs(p.bias.data()[j] - db) > 1e-5 * (1 + db_scale)) return false;
    for (fusor::index_t q = 0; q < p.k; q += 1 + p.k / 5) {
      double dw = 0, scale = 1;
      for (fusor::index_t i = 0; i < p.m; ++i) {
        const double v = double(p.y.data()[i * p.n + j]) * double(p.x.data()[i * p.k + q]);
        dw += v;
        scale += std::fabs(v);
      }
      if (std::fabs(p.w.data()[j * p.k + q] - dw) > 1e-5 * scale) return false;
    }
  }
  return true;
}

void fusor_weight_gradient(benchmark::State& state) {
  linear_problem<float> p(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    fusor::matmul(p.w, fusor::transpose(p.y.view()), p.x);
    benchmark::DoNotOptimize(p.w.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, weight_gradient_check(p, false));
}

void fusor_weight_gradient_bias(benchmark::State& state) {
  linear_problem<float> p(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    fusor::matmul(p.w, fusor::transpose(p.y.view()), p.x, fusor::epilogue::bias_gradient_a(p.bias));
    benchmark::DoNotOptimize(p.w.data());
    benchmark::ClobberMemory();
  }
  report(state, p.m, p.n, p.k, weight_gradient_check(p, true));
}

// {m, n, k}: square products and a Linear layer's shapes (tokens x features).
void shapes(benchmark::internal::Benchmark* b) {
  b->Args({256, 256, 256})->Args({512, 512, 512})->Args({1024, 1024, 1024})->Args({2048, 1024, 1024});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

// Run with --benchmark_enable_random_interleaving=true so that peers share the
// machine's ups and downs (bench/RESULTS.md has the command).
BENCHMARK(openblas_sgemm)->Apply(shapes);
BENCHMARK(fusor_sgemm)->Apply(shapes);
BENCHMARK(fusor_bf16)->Apply(shapes);
BENCHMARK(fusor_bias_gelu_separate)->Apply(shapes);
BENCHMARK(fusor_bias_gelu_fused)->Apply(shapes);
BENCHMARK(fusor_weight_gradient)->Apply(shapes)->Args({1024, 512, 128});
BENCHMARK(fusor_weight_gradient_bias)->Apply(shapes)->Args({1024, 512, 128});

BENCHMARK_MAIN();
