// bench/reduce_cuda.cu — reductions on the GPU against the two rooflines that
// matter: a device-to-device copy (what the memory system delivers) and CUB's
// own DeviceReduce::Sum on a raw pointer (what calling the library directly
// gives), for 2^26 elements in fp32 and bf16:
//
//   whole sum, whole sum of x * y + 1 (a fused expression), amax, argmax,
//   row sums of [16384, 4096] (axis contiguous), column sums (axis strided),
//   and sums of the rows of [4, 2^24] (few outputs, long axis: split); the
//   whole sum of a view one element in (not 16-byte aligned: one element a
//   load), and the optimizer's gradient-norm pass (optim::add_sum_of_squares:
//   squares into an fp64 total, one launch).
//
// A plain program: each variant is timed with CUDA events around single runs
// after warm-up; the median of 50 is printed in a Markdown table. "read GB/s"
// is the input bytes over the time (10^9 bytes per second); the copy's
// bandwidth counts its reads and writes; "vs copy" is read GB/s over copy GB/s
// (1.0 = the reduction streams its input as fast as a copy moves bytes).
// Every variant's result is checked against an fp64 host reference.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <cuda_runtime.h>
#include <cub/device/device_reduce.cuh>

#include "cuda_timing.hpp"
#include "fusor/core/buffer.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/kernels/reduce.hpp"
#include "fusor/optim/gradient_norm.hpp"

namespace {

constexpr fusor::index_t elements = fusor::index_t(1) << 26;
constexpr int warmup_runs = 5;
constexpr int timed_runs = 50;

template <class T, std::size_t R>
using device_tensor = fusor::tensor<T, fusor::dextents<fusor::index_t, R>, fusor::row_major, fusor::device_space>;
template <class T, std::size_t R>
using host_tensor = fusor::tensor<T, fusor::dextents<fusor::index_t, R>>;

void print_row(const char* precision, const char* variant, double ms, double read_bytes, double copy_gbs) {
  const double gbs = read_bytes / ms * 1e-6;
  std::printf("| %-9s | %-34s | %9.3f | %10.1f | %7.2f |\n", precision, variant, ms, gbs, gbs / copy_gbs);
}

template <class T>
double host_value(const device_tensor<T, 1>& t, fusor::index_t i) {
  host_tensor<T, 1> h(t.extent(0));
  fusor::copy(h, t);
  return fusor::convert<double>(h.data()[i]);
}

template <class T>
struct to_float {
  __host__ __device__ float operator()(T v) const { return fusor::convert<float>(v); }
};

bool check(const char* what, double got, double want, double tolerance) {
  if (std::fabs(got - want) <= tolerance) return true;
  std::fprintf(stderr, "%s: got %.9g, expected %.9g (tolerance %g)\n", what, got, want, tolerance);
  return false;
}

template <class T>
bool run(const char* precision, cudaStream_t stream) {
  host_tensor<T, 1> hx(elements), hy(elements);
  std::mt19937 engine(2026);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  double sum = 0, expression_sum = 0, squares = 0, largest = -INFINITY;
  fusor::index_t largest_at = 0;
  std::vector<double> row_sums(16384), split_sums(4);
  for (fusor::index_t i = 0; i < elements; ++i) {
    hx.data()[i] = fusor::convert<T>(uniform(engine));
    hy.data()[i] = fusor::convert<T>(uniform(engine));
    const float a = fusor::convert<float>(hx.data()[i]), b = fusor::convert<float>(hy.data()[i]);
    sum += a, expression_sum += double(a * b + 1.0f), squares += double(a) * a;
    if (a > largest) largest = a, largest_at = i;
    row_sums[i / 4096] += a, split_sums[i / (elements / 4)] += a;
  }
  double column0 = 0;
  for (fusor::index_t r = 0; r < 16384; ++r) column0 += fusor::convert<double>(hx.data()[r * 4096]);

  device_tensor<T, 1> x(elements), y(elements), copy_destination(elements);
  fusor::copy(x, hx);
  fusor::copy(y, hy);
  device_tensor<float, 1> scalar(1), rows(16384), columns(4096), splits(4);
  device_tensor<fusor::index_t, 1> index(1);
  const auto matrix = fusor::view<T, fusor::dextents<fusor::index_t, 2>, fusor::row_major, fusor::device_space>(
      x.data(), 16384, 4096);
  const auto long_rows = fusor::view<T, fusor::dextents<fusor::index_t, 2>, fusor::row_major, fusor::device_space>(
      x.data(), 4, elements / 4);
  const fusor::cuda_executor ex{stream};
  const double n = double(elements), bytes = n * sizeof(T), tolerance = 1e-3 * std::sqrt(n) * 4;

  // The rooflines: a copy, and CUB called directly on the raw pointer (fp32 accumulation).
  const double copy_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] {
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(copy_destination.data(), x.data(), std::size_t(bytes), cudaMemcpyDeviceToDevice,
                                     stream));
  });
  const double copy_gbs = 2 * bytes / copy_ms * 1e-6;
  std::size_t cub_bytes = 0;
  FUSOR_CUDA_CHECK(cub::DeviceReduce::TransformReduce(nullptr, cub_bytes, x.data(), scalar.data(), elements,
                                                      ::cuda::std::plus<float>{}, to_float<T>{}, 0.0f, stream));
  fusor::buffer<fusor::device_space> cub_temp(cub_bytes, stream);
  const double cub_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] {
    FUSOR_CUDA_CHECK(cub::DeviceReduce::TransformReduce(cub_temp.data(), cub_bytes, x.data(), scalar.data(), elements,
                                                        ::cuda::std::plus<float>{}, to_float<T>{}, 0.0f, stream));
  });
  bool ok = check("cub sum", host_value(scalar, 0), sum, tolerance);

  const double sum_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::sum(scalar, x, ex); });
  ok &= check("sum", host_value(scalar, 0), sum, tolerance);
  const double expression_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::sum(scalar, x * y + 1, ex); });
  ok &= check("sum(x * y + 1)", host_value(scalar, 0), expression_sum, tolerance * 2);
  const double amax_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::amax(scalar, x, ex); });
  ok &= check("amax", host_value(scalar, 0), largest, 0);
  const double argmax_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::argmax(index, x, ex); });
  ok &= check("argmax", host_value(index, 0), double(largest_at), 0);
  const double rows_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::sum(rows, matrix, 1, ex); });
  ok &= check("row sums", host_value(rows, 16383), row_sums[16383], 1e-2);
  const double columns_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::sum(columns, matrix, 0, ex); });
  ok &= check("column sums", host_value(columns, 0), column0, 1e-2);
  const double split_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::sum(splits, long_rows, 1, ex); });
  ok &= check("split row sums", host_value(splits, 3), split_sums[3], tolerance);
  const auto shifted = fusor::view<T, fusor::dextents<fusor::index_t, 1>, fusor::row_major, fusor::device_space>(
      x.data() + 1, elements - 1);
  const double shifted_ms =
      fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::sum(scalar, shifted, ex); });
  ok &= check("sum of a view one element in", host_value(scalar, 0), sum - fusor::convert<double>(hx.data()[0]),
              tolerance);
  device_tensor<double, 1> total(1);
  const fusor::optim::gradient_norm_workspace<fusor::device_space> workspace(stream);
  const double norm_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] {
    fusor::optim::add_sum_of_squares(total.data(), x.view(), workspace, ex);
  });
  FUSOR_CUDA_CHECK(cudaMemsetAsync(total.data(), 0, sizeof(double), stream));
  fusor::optim::add_sum_of_squares(total.data(), x.view(), workspace, ex);
  ok &= check("gradient norm's sum of squares", host_value(total, 0), squares, 1e-9 * squares);

  print_row(precision, "cudaMemcpy D2D (reads + writes)", copy_ms, 2 * bytes, copy_gbs);
  print_row(precision, "CUB DeviceReduce sum (raw pointer)", cub_ms, bytes, copy_gbs);
  print_row(precision, "fusor sum", sum_ms, bytes, copy_gbs);
  print_row(precision, "fusor sum(x * y + 1)", expression_ms, 2 * bytes, copy_gbs);
  print_row(precision, "fusor amax", amax_ms, bytes, copy_gbs);
  print_row(precision, "fusor argmax", argmax_ms, bytes, copy_gbs);
  print_row(precision, "fusor row sums [16384, 4096]", rows_ms, bytes, copy_gbs);
  print_row(precision, "fusor column sums [16384, 4096]", columns_ms, bytes, copy_gbs);
  print_row(precision, "fusor row sums [4, 2^24] (split)", split_ms, bytes, copy_gbs);
  print_row(precision, "fusor sum, a view one element in", shifted_ms, bytes - sizeof(T), copy_gbs);
  print_row(precision, "gradient norm (add_sum_of_squares)", norm_ms, bytes, copy_gbs);
  std::printf("| %-9s | fusor sum / CUB sum (time ratio)   | %9.3f |            |         |\n", precision,
              cub_ms / sum_ms);
  return ok;
}

}  // namespace

int main() try {
  if (!fusor::gpu::available()) {
    std::fprintf(stderr, "bench_reduce_cuda: no CUDA GPU available\n");
    return 77;
  }
  int device = 0;
  cudaDeviceProp properties{};
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::printf("device: %s (sm_%d%d); 2^26 elements; median of %d runs\n\n", properties.name, properties.major,
              properties.minor, timed_runs);
  std::printf("| precision | variant                            | time (ms) | read GB/s | vs copy |\n");
  std::printf("|-----------|------------------------------------|-----------|-----------|---------|\n");
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bool ok = run<float>("fp32", stream);
  ok &= run<fusor::bfloat16>("bf16", stream);
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
  if (!ok) {
    std::fprintf(stderr, "bench_reduce_cuda: a variant computed a wrong result\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_reduce_cuda: %s\n", e.what());
  return 1;
}
