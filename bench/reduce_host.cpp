// bench/reduce_host.cpp — host reductions: fusor against Eigen 3.4 and plain
// loops, on 2^24 floats (64 MiB, far beyond the caches) and a 4096 x 4096
// row-major matrix (row sums: the axis contiguous; column sums: strided).
//
// Bytes processed are the input bytes each variant must read (4 per float
// element, 8 for the two-input expression, 2 per bf16 element); the two-pass
// variant of the expression really moves 20 per element (read x, y; write and
// read back a temporary; counted as 8 all the same, as the useful work is the
// same). Every variant checks its result against an fp64 reference, so a fast
// wrong answer fails instead of winning.
//
// Peers: Eigen (lazy expressions, vectorised reductions, single-threaded: Eigen
// does not parallelise reductions) and a plain `omp simd` loop, 1 and 2 threads.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <Eigen/Core>
#include <benchmark/benchmark.h>

#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/reduce.hpp"

namespace {

using vector = fusor::tensor<float, fusor::dextents<fusor::index_t, 1>>;
using bf16_vector = fusor::tensor<fusor::bfloat16, fusor::dextents<fusor::index_t, 1>>;
using matrix_view = fusor::view<float, fusor::dextents<fusor::index_t, 2>>;
using eigen_array = Eigen::Map<const Eigen::ArrayXf, Eigen::Aligned64>;
using eigen_matrix = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

constexpr fusor::index_t elements = fusor::index_t(1) << 24;
constexpr fusor::index_t side = 4096;  // side * side == elements

struct workload {
  vector x{elements}, y{elements}, temporary{elements}, row_out{side}, column_out{side};
  bf16_vector xb{elements};
  double sum = 0, expression_sum = 0, squares = 0, bf16_sum = 0, largest = -INFINITY;
  fusor::index_t largest_at = 0;
  std::vector<double> row_sums = std::vector<double>(side), column_sums = std::vector<double>(side);

  workload() {
    std::mt19937 engine(2026);
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    for (fusor::index_t i = 0; i < elements; ++i) {
      const float a = x.data()[i] = uniform(engine), b = y.data()[i] = uniform(engine);
      xb.data()[i] = fusor::bfloat16(a);
      sum += a, expression_sum += double(a * b + 1.0f), squares += double(a) * a;
      bf16_sum += double(float(xb.data()[i]));
      if (a > largest) largest = a, largest_at = i;
      row_sums[i / side] += a, column_sums[i % side] += a;
    }
  }
  static workload& get() {
    static workload w;
    return w;
  }
  matrix_view matrix() const { return matrix_view(x.data(), side, side); }
};

// |got - want| <= 1e-3 * scale, the scale being about what a correct fp32 sum of
// 2^24 terms may be off by a thousand times over: sqrt(n) for terms of mean 0;
// a fraction of the sum for terms of one sign, where Eigen's and the loops'
// vectorised lanes (a million terms each) drift by about 1e-5.
constexpr double sum_tolerance = 1e-3;
bool near(double got, double want, double scale) { return std::fabs(got - want) <= sum_tolerance * scale; }

void finish(benchmark::State& state, bool correct, double bytes_per_element, fusor::index_t n = elements) {
  if (!correct) state.SkipWithError("wrong result");
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes_per_element * double(n)));
}

fusor::host_executor on(int threads) { return fusor::host_executor{.threads = threads}; }

// ---- sum of one fp32 array --------------------------------------------------------
void fusor_sum(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = fusor::sum(w.x, on(threads)));
  finish(state, near(s, w.sum, std::sqrt(double(elements)) * 2), 4);
}
void eigen_sum(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_array a(w.x.data(), elements);
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = a.sum());
  finish(state, near(s, w.sum, std::sqrt(double(elements)) * 2), 4);
}
// The plain loops sit in functions of their own: written inline in the
// benchmark loop, GCC 12 miscompiles the OpenMP reduction (it returns garbage).
template <class T>
[[gnu::noinline]] float plain_sum(const T* x, fusor::index_t n, [[maybe_unused]] int threads) {
  float acc = 0;
#if defined(_OPENMP)
#pragma omp parallel for simd reduction(+ : acc) num_threads(threads) schedule(static) if (parallel : threads > 1)
#endif
  for (fusor::index_t i = 0; i < n; ++i) acc += float(x[i]);
  return acc;
}
void loop_sum(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = plain_sum(w.x.data(), elements, threads));
  finish(state, near(s, w.sum, std::sqrt(double(elements)) * 2), 4);
}

// ---- sum of a fused expression (x * y + 1) --------------------------------------------
void fusor_expression_sum(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = fusor::sum(w.x * w.y + 1, on(threads)));
  finish(state, near(s, w.expression_sum, w.expression_sum * 1e-2), 8);
}
void fusor_two_passes(benchmark::State& state, int threads) {  // materialise, then reduce
  auto& w = workload::get();
  float s = 0;
  for (auto _ : state) {
    fusor::assign(w.temporary, w.x * w.y + 1, on(threads));
    benchmark::DoNotOptimize(s = fusor::sum(w.temporary, on(threads)));
  }
  finish(state, near(s, w.expression_sum, w.expression_sum * 1e-2), 8);
}
void eigen_expression_sum(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_array a(w.x.data(), elements), b(w.y.data(), elements);
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = (a * b + 1.0f).sum());
  finish(state, near(s, w.expression_sum, w.expression_sum * 1e-2), 8);
}

// ---- amax, argmax, norm -------------------------------------------------------------
void fusor_amax(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float m = 0;
  for (auto _ : state) benchmark::DoNotOptimize(m = fusor::amax(w.x, on(threads)));
  finish(state, m == float(w.largest), 4);
}
void eigen_amax(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_array a(w.x.data(), elements);
  float m = 0;
  for (auto _ : state) benchmark::DoNotOptimize(m = a.maxCoeff());
  finish(state, m == float(w.largest), 4);
}
void fusor_argmax(benchmark::State& state, int threads) {
  auto& w = workload::get();
  fusor::index_t at = -1;
  for (auto _ : state) benchmark::DoNotOptimize(at = fusor::argmax(w.x, on(threads)));
  finish(state, at == w.largest_at, 4);
}
void eigen_argmax(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_array a(w.x.data(), elements);
  Eigen::Index at = -1;
  for (auto _ : state) {
    a.maxCoeff(&at);
    benchmark::DoNotOptimize(at);
  }
  finish(state, at == w.largest_at, 4);
}
void fusor_norm(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float n = 0;
  for (auto _ : state) benchmark::DoNotOptimize(n = fusor::norm(w.x, on(threads)));
  finish(state, near(double(n) * n, w.squares, w.squares), 4);
}
void eigen_norm(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_array a(w.x.data(), elements);
  float n = 0;
  for (auto _ : state) benchmark::DoNotOptimize(n = a.matrix().norm());
  finish(state, near(double(n) * n, w.squares, w.squares), 4);
}

// ---- bf16 storage, fp32 accumulation --------------------------------------------------
void fusor_bf16_sum(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = fusor::sum(w.xb, on(threads)));
  finish(state, near(s, w.bf16_sum, std::sqrt(double(elements)) * 2), 2);
}
void loop_bf16_sum(benchmark::State& state, int threads) {
  auto& w = workload::get();
  float s = 0;
  for (auto _ : state) benchmark::DoNotOptimize(s = plain_sum(w.xb.data(), elements, threads));
  finish(state, near(s, w.bf16_sum, std::sqrt(double(elements)) * 2), 2);
}

// ---- along an axis of a 4096 x 4096 row-major matrix -----------------------------------
bool rows_correct(const vector& out, const std::vector<double>& want) {
  for (fusor::index_t i = 0; i < side; ++i)
    if (!near(out.data()[i], want[i], 64)) return false;
  return true;
}
void fusor_row_sums(benchmark::State& state, int threads) {
  auto& w = workload::get();
  for (auto _ : state) {
    fusor::sum(w.row_out, w.matrix(), 1, on(threads));
    benchmark::ClobberMemory();
  }
  finish(state, rows_correct(w.row_out, w.row_sums), 4);
}
void eigen_row_sums(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_matrix m(w.x.data(), side, side);
  Eigen::Map<Eigen::VectorXf> out(w.row_out.data(), side);
  for (auto _ : state) {
    out = m.rowwise().sum();
    benchmark::ClobberMemory();
  }
  finish(state, rows_correct(w.row_out, w.row_sums), 4);
}
void fusor_column_sums(benchmark::State& state, int threads) {
  auto& w = workload::get();
  for (auto _ : state) {
    fusor::sum(w.column_out, w.matrix(), 0, on(threads));
    benchmark::ClobberMemory();
  }
  finish(state, rows_correct(w.column_out, w.column_sums), 4);
}
void eigen_column_sums(benchmark::State& state) {
  auto& w = workload::get();
  const eigen_matrix m(w.x.data(), side, side);
  Eigen::Map<Eigen::RowVectorXf> out(w.column_out.data(), side);
  for (auto _ : state) {
    out = m.colwise().sum();
    benchmark::ClobberMemory();
  }
  finish(state, rows_correct(w.column_out, w.column_sums), 4);
}

void arguments(benchmark::internal::Benchmark* b) { b->Unit(benchmark::kMillisecond)->UseRealTime(); }

#define FUSOR_BENCH_THREADS(f)                           \
  BENCHMARK_CAPTURE(f, threads_1, 1)->Apply(arguments); \
  BENCHMARK_CAPTURE(f, threads_2, 2)->Apply(arguments);

FUSOR_BENCH_THREADS(fusor_sum)
BENCHMARK(eigen_sum)->Apply(arguments);
FUSOR_BENCH_THREADS(loop_sum)
FUSOR_BENCH_THREADS(fusor_expression_sum)
FUSOR_BENCH_THREADS(fusor_two_passes)
BENCHMARK(eigen_expression_sum)->Apply(arguments);
FUSOR_BENCH_THREADS(fusor_amax)
BENCHMARK(eigen_amax)->Apply(arguments);
FUSOR_BENCH_THREADS(fusor_argmax)
BENCHMARK(eigen_argmax)->Apply(arguments);
FUSOR_BENCH_THREADS(fusor_norm)
BENCHMARK(eigen_norm)->Apply(arguments);
FUSOR_BENCH_THREADS(fusor_bf16_sum)
FUSOR_BENCH_THREADS(loop_bf16_sum)
FUSOR_BENCH_THREADS(fusor_row_sums)
BENCHMARK(eigen_row_sums)->Apply(arguments);
FUSOR_BENCH_THREADS(fusor_column_sums)
BENCHMARK(eigen_column_sums)->Apply(arguments);

}  // namespace

BENCHMARK_MAIN();
