// bench/cuda_fusion.cu — what fusing elementwise work into one kernel buys on
// the GPU: the host benchmark's expression (bench/host_fusion.cpp)
//
//   out = (a * b + c) * 0.5f - (a - c) * b
//
// as one fusor kernel, as six kernels through temporaries, and beside a
// device-to-device cudaMemcpy that moves the same number of bytes, which is the
// roofline an elementwise kernel can hope for. 2^26 elements, fp32 and bf16
// (bf16 storage, fp32 arithmetic; the unfused variant stores its temporaries
// in bf16, as an eager framework would).
//
// A plain program: each variant is timed with CUDA events around single runs
// after warm-up, and the median is printed in a table. Bandwidths are in GB/s
// (10^9 bytes per second).
// Then the README's first program with a broadcast bias row, gelu(x * w + b),
// on the row path (rows of 4096) and on the strided path (rows of 4095).
//   useful GB/s: 3 inputs read + 1 output written, per element, over the time
//                (the bias-row variants: 2 read + 1 written);
//   moved GB/s:  what the variant really reads and writes (unfused: 17 arrays;
//                copy: 2 x its size), over the time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "bench_targets.hpp"
#include "cuda_timing.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/expr/operators.hpp"

namespace {

constexpr int elements = 1 << 26;
constexpr int warmup_runs = 5;
constexpr int timed_runs = 50;
fusor_bench::targets goals;

template <class T>
using device_vector = fusor::tensor<T, fusor::extents<int, fusor::dynamic>, fusor::row_major, fusor::device_space>;
template <class T>
using host_vector = fusor::tensor<T, fusor::extents<int, fusor::dynamic>>;
template <class T>
using device_matrix_view =
    fusor::view<T, fusor::extents<int, fusor::dynamic, fusor::dynamic>, fusor::row_major, fusor::device_space>;
template <class T>
using device_row_view = fusor::view<T, fusor::extents<int, fusor::dynamic>, fusor::row_major, fusor::device_space>;

void print_row(const char* precision, const char* variant, double ms, double useful_bytes, double moved_bytes,
               double copy_ms) {
  std::printf("| %-9s | %-18s | %9.3f | %11.1f | %10.1f | %12.2f |\n", precision, variant, ms,
              useful_bytes / ms * 1e-6, moved_bytes / ms * 1e-6, copy_ms / ms);
}

// Checks out against the expression computed on the host in float, rounded to
// T; `tolerance` is relative to 1 + |expected|. Returns whether it matched.
template <class T>
bool matches(const device_vector<T>& out, const host_vector<T>& a, const host_vector<T>& b,
             const host_vector<T>& c, float tolerance, const char* what) {
  host_vector<T> h(elements);
  fusor::copy(h, out);
  for (int i = 0; i < elements; ++i) {
    const float x = fusor::convert<float>(a.data()[i]), y = fusor::convert<float>(b.data()[i]),
                z = fusor::convert<float>(c.data()[i]);
    const float expected = fusor::convert<float>(fusor::convert<T>((x * y + z) * 0.5f - (x - z) * y));
    const float got = fusor::convert<float>(h.data()[i]);
    if (!(std::fabs(got - expected) <= tolerance * (1.0f + std::fabs(expected)))) {
      std::fprintf(stderr, "%s: element %d is %g, expected %g\n", what, i, got, expected);
      return false;
    }
  }
  return true;
}

// Checks the broadcast variant, out[r, j] = gelu(a[r, j] * b[r, j] + c[j]) over
// rows of `cols`, at every 997th element; as matches() otherwise.
template <class T>
bool matches_broadcast(const device_vector<T>& out, const host_vector<T>& a, const host_vector<T>& b,
                       const host_vector<T>& c, int rows, int cols, float tolerance, const char* what) {
  host_vector<T> h(elements);
  fusor::copy(h, out);
  for (int i = 0; i < rows * cols; i += 997) {
    const float v = fusor::convert<float>(a.data()[i]) * fusor::convert<float>(b.data()[i]) +
                    fusor::convert<float>(c.data()[i % cols]);
    const float expected = fusor::convert<float>(fusor::convert<T>(0.5f * v * (1 + std::erf(v / std::sqrt(2.0f)))));
    const float got = fusor::convert<float>(h.data()[i]);
    if (!(std::fabs(got - expected) <= tolerance * (1.0f + std::fabs(expected)))) {
      std::fprintf(stderr, "%s: element %d is %g, expected %g\n", what, i, got, expected);
      return false;
    }
  }
  return true;
}

template <class T>
bool run(const char* precision, float tolerance, cudaStream_t stream) {
  host_vector<T> ha(elements), hb(elements), hc(elements);
  std::mt19937 engine(2026);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (auto* h : {&ha, &hb, &hc})
    for (int i = 0; i < elements; ++i) h->data()[i] = fusor::convert<T>(uniform(engine));

  device_vector<T> a(elements), b(elements), c(elements), out(elements);
  device_vector<T> t1(elements), t2(elements), t3(elements), t4(elements), t5(elements);
  // The copy moves as many bytes as the fused pass: 2n elements read, 2n written.
  device_vector<T> copy_source(2 * elements), copy_destination(2 * elements);
  fusor::copy(a, ha);
  fusor::copy(b, hb);
  fusor::copy(c, hc);
  FUSOR_CUDA_CHECK(cudaMemsetAsync(copy_source.data(), 0, 2 * std::size_t(elements) * sizeof(T), stream));
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());

  const fusor::cuda_executor executor{stream};
  auto fused = [&] { fusor::assign(out, (a * b + c) * 0.5f - (a - c) * b, executor); };
  auto unfused = [&] {
    fusor::assign(t1, a * b, executor);
    fusor::assign(t2, t1 + c, executor);
    fusor::assign(t3, t2 * 0.5f, executor);
    fusor::assign(t4, a - c, executor);
    fusor::assign(t5, t4 * b, executor);
    fusor::assign(out, t3 - t5, executor);
  };
  auto copy = [&] {
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(copy_destination.data(), copy_source.data(),
                                     2 * std::size_t(elements) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  };

  bool ok = true;
  FUSOR_CUDA_CHECK(cudaMemsetAsync(out.data(), 0, std::size_t(elements) * sizeof(T), stream));
  const double fused_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, fused);
  ok &= matches(out, ha, hb, hc, tolerance, "fused");
  FUSOR_CUDA_CHECK(cudaMemsetAsync(out.data(), 0, std::size_t(elements) * sizeof(T), stream));
  const double unfused_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, unfused);
  // The unfused variant rounds its five temporaries to T: a looser check for bf16.
  ok &= matches(out, ha, hb, hc, tolerance * 8, "unfused");
  const double copy_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, copy);

  // The README's first program, y = gelu(x * w + b) with a bias row b broadcast over every row: rows of 4096
  // take the row path (vector loads along each row, b's element once a step); rows of 4095, no whole number
  // of vector steps, the strided one (a multi-index an element). 2 inputs read + 1 output written.
  const int rows = elements / 4096;
  auto broadcast_ms = [&](int cols, const char* what) {
    const device_matrix_view<T> x(a.data(), rows, cols), w(b.data(), rows, cols), y(out.data(), rows, cols);
    const device_row_view<T> bias(c.data(), cols);
    FUSOR_CUDA_CHECK(cudaMemsetAsync(out.data(), 0, std::size_t(elements) * sizeof(T), stream));
    const double ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream,
                                             [&] { fusor::assign(y, fusor::gelu(x * w + bias), executor); });
    ok &= matches_broadcast(out, ha, hb, hc, rows, cols, tolerance, what);
    return ms;
  };
  const double rows_ms = broadcast_ms(4096, "bias row, 4096 a row");
  const double strided_ms = broadcast_ms(4095, "bias row, 4095 a row");

  const double n = elements, size = sizeof(T);
  print_row(precision, "fused", fused_ms, 4 * n * size, 4 * n * size, copy_ms);
  goals.observe("fused elementwise vs device-to-device copy (same bytes)", 0.90, copy_ms / fused_ms, precision);
  print_row(precision, "unfused (6)", unfused_ms, 4 * n * size, 17 * n * size, copy_ms);
  print_row(precision, "cudaMemcpy D2D", copy_ms, 4 * n * size, 4 * n * size, copy_ms);
  // The copy's time for the broadcast variants' bytes: 3 of its 4 arrays.
  const double rows_bytes = 3.0 * rows * 4096 * size, strided_bytes = 3.0 * rows * 4095 * size;
  const double copy_rate = 4 * n * size / copy_ms;
  print_row(precision, "bias row (rows)", rows_ms, rows_bytes, rows_bytes, rows_bytes / copy_rate);
  goals.observe("broadcast bias row, gelu(x * w + b), vs copy (same bytes)", 0.90,
                rows_bytes / copy_rate / rows_ms, precision);
  print_row(precision, "bias row (strided)", strided_ms, strided_bytes, strided_bytes, strided_bytes / copy_rate);
  return ok;
}

}  // namespace

int main() try {
  if (!fusor::gpu::available()) {
    std::fprintf(stderr, "bench_cuda_fusion: no CUDA GPU available\n");
    return 77;
  }
  int device = 0;
  cudaDeviceProp properties{};
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  int runtime = 0, driver = 0;
  FUSOR_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  FUSOR_CUDA_CHECK(cudaDriverGetVersion(&driver));
  std::printf("device: %s (sm_%d%d), CUDA runtime %d, driver %d\n", properties.name, properties.major,
              properties.minor, runtime, driver);
  std::printf("out = (a * b + c) * 0.5f - (a - c) * b over 2^26 elements; median of %d runs\n", timed_runs);
  std::printf("copy = cudaMemcpyAsync device to device of 2 x 2^26 elements (same bytes moved as the fused pass)\n\n");
  std::printf("| precision | variant            | time (ms) | useful GB/s | moved GB/s | copy time / time |\n");
  std::printf("|-----------|--------------------|-----------|-------------|------------|------------------|\n");

  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  bool ok = run<float>("fp32", 1e-5f, stream);
  ok &= run<fusor::bfloat16>("bf16", 1e-2f, stream);
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
  goals.print();
  if (!ok) {
    std::fprintf(stderr, "bench_cuda_fusion: a variant computed a wrong result\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda_fusion: %s\n", e.what());
  return 1;
}
