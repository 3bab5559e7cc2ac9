// bench/rowwise_cuda.cu — the row-wise kernels on the GPU in bytes per second,
// against the copy bandwidth measured in the same run (a device-to-device
// cudaMemcpy of 256 MiB, counted as read + written bytes, like the kernels).
//
// For rows of n = 4096 ... 131072 elements (2^26 elements per array in all;
// 50257, GPT-2's vocabulary, has rows that start between 16-byte boundaries):
// softmax forward (fp32, bf16), softmax backward (fp32), layernorm forward
// (fp32, bf16), layernorm backward (bf16), and the fused cross-entropy with
// bf16 logits (losses and the logits' gradient, in place as llm.c does).
// Bytes are what each kernel must read and write once: softmax x + y,
// backward y + dy + dx, layernorm x + y (weight, bias, statistics are small),
// cross-entropy logits read + gradient written. Each figure is the median of
// 30 timed runs (CUDA events) after 5 warm-up runs; the first row of every
// output is checked against the host executor first. The bf16 softmax,
// layernorm (forward and backward) and cross-entropy are timed twice: with
// the staged kernel (the default) and the plain one ("unstaged"). Prints a
// Markdown table; exits 77 without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>

#include "bench_targets.hpp"
#include "cuda_timing.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/kernels/cross_entropy.hpp"
#include "fusor/kernels/layernorm.hpp"
#include "fusor/kernels/softmax.hpp"

namespace {

using fusor::index_t;
using matrix_extents = fusor::dextents<index_t, 2>;
using vector_extents = fusor::dextents<index_t, 1>;
template <class P>
using device_matrix = fusor::tensor<P, matrix_extents, fusor::row_major, fusor::device_space>;
template <class P>
using device_vector = fusor::tensor<P, vector_extents, fusor::row_major, fusor::device_space>;
template <class P>
using host_matrix = fusor::tensor<P, matrix_extents>;
template <class P>
using host_vector = fusor::tensor<P, vector_extents>;

constexpr index_t elements = index_t(1) << 26;
constexpr int warmup_runs = 5, timed_runs = 30;

// Row r of a matrix as a [1, n] view (for the host reference of one row).
template <class T>
auto first_row(const T& t) {
  using view = typename std::remove_cvref_t<decltype(t.view())>;
  return view(t.data(), 1, t.extent(1));
}

template <class P>
host_matrix<P> random_matrix(index_t rows, index_t n, unsigned seed, float low, float high) {
  host_matrix<P> h(rows, n);
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = fusor::convert<P>(uniform(engine));
  return h;
}
template <class P>
device_matrix<P> on_device(const host_matrix<P>& h) {
  device_matrix<P> d(h.extents());
  fusor::copy(d, h);
  return d;
}
template <class P>
device_vector<P> on_device(const host_vector<P>& h) {
  device_vector<P> d(h.extents());
  fusor::copy(d, h);
  return d;
}

// The first row of a device result against the same row from the host executor.
template <class P>
bool first_row_matches(const device_matrix<P>& got, const host_matrix<P>& want, double tolerance) {
  const index_t n = got.extent(1);
  host_matrix<P> h(got.extents());
  fusor::copy(h, got);
  for (index_t j = 0; j < n; ++j) {
    const double g = fusor::convert<double>(h(0, j)), w = fusor::convert<double>(want(0, j));
    if (!(std::fabs(g - w) <= tolerance * std::max(1.0, std::fabs(w)))) {
      std::fprintf(stderr, "rowwise_cuda: column %lld: got %g, want %g\n", (long long)j, g, w);
      return false;
    }
  }
  return true;
}

// Fills a device result with NaN bytes, so that an element a kernel leaves unwritten fails the check.
template <class P>
void poison(device_matrix<P>& t) {
  FUSOR_CUDA_CHECK(cudaMemset(t.data(), 0xff, std::size_t(t.size()) * sizeof(P)));
}

double copy_gbps = 0;
bool all_correct = true;
fusor_bench::targets goals;

void print_row(const char* kernel, const char* precision, index_t rows, index_t n, double ms, double bytes, bool ok) {
  const double gbps = bytes / ms * 1e-6;
  std::printf("| %-22s | %-4s | %6lld x %-6lld | %8.3f | %7.0f | %5.2f | %s |\n", kernel, precision, (long long)rows,
              (long long)n, ms, gbps, gbps / copy_gbps, ok ? "yes" : "NO");
  all_correct = all_correct && ok;
  // Softmax and layernorm, forward and backward: within 10% of the copy bound.
  const std::string k = kernel;
  if ((k.rfind("softmax", 0) == 0 || k.rfind("layernorm", 0) == 0) && k.find("unstaged") == std::string::npos)
    goals.observe(k + " vs copy bandwidth", 0.90, gbps / copy_gbps,
                  std::string(precision) + " " + std::to_string(rows) + " x " + std::to_string(n));
}

// 16-bit rows: the kernels above stage each group's next row in shared
// memory (kernels/row_reduce.hpp, staged_row). The plain kernel, checked
// (`check` runs it once and compares) and timed (`run`) in the same run.
template <class Check, class Run>
void print_unstaged(const char* kernel, const char* precision, index_t rows, index_t n, double bytes,
                    cudaStream_t stream, const Check& check, const Run& run) {
  fusor::detail::row_staging() = false;
  const bool ok = check();
  const double ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, run);
  fusor::detail::row_staging() = true;
  print_row(kernel, precision, rows, n, ms, bytes, ok);
}

template <class P>
const char* name() {
  return std::is_same_v<P, float> ? "fp32" : "bf16";
}

template <class P>
void softmax_rows(index_t rows, index_t n, cudaStream_t stream) {
  const fusor::cuda_executor ex{stream};
  const auto hx = random_matrix<P>(rows, n, 1, -8.0f, 8.0f);
  const auto x = on_device(hx);
  device_matrix<P> y(rows, n);
  host_matrix<P> want(1, n);
  fusor::softmax(want, first_row(hx));
  fusor::softmax(y, x, ex);
  const bool ok = first_row_matches(y, want, 1e-2);
  const double ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::softmax(y, x, ex); });
  print_row("softmax", name<P>(), rows, n, ms, 2.0 * double(rows * n) * sizeof(P), ok);
  if constexpr (!std::is_same_v<P, float>)
    print_unstaged(
        "softmax unstaged", name<P>(), rows, n, 2.0 * double(rows * n) * sizeof(P), stream,
        [&] {
          poison(y);
          fusor::softmax(y, x, ex);
          return first_row_matches(y, want, 1e-2);
        },
        [&] { fusor::softmax(y, x, ex); });

  if constexpr (std::is_same_v<P, float>) {
    const auto hdy = random_matrix<P>(rows, n, 2, -1.0f, 1.0f);
    const auto dy = on_device(hdy);
    device_matrix<P> dx(rows, n);
    host_matrix<P> hy(1, n), want_dx(1, n);
    fusor::copy(hy, first_row(y));
    fusor::softmax_backward(want_dx, hy, first_row(hdy));
    fusor::softmax_backward(dx, y, dy, ex);
    const bool backward_ok = first_row_matches(dx, want_dx, 1e-4);
    const double backward_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::softmax_backward(dx, y, dy, ex); });
    print_row("softmax_backward", name<P>(), rows, n, backward_ms, 3.0 * double(rows * n) * sizeof(P), backward_ok);
  }
}

template <class P>
void layernorm_rows(index_t rows, index_t n, cudaStream_t stream) {
  const fusor::cuda_executor ex{stream};
  const auto hx = random_matrix<P>(rows, n, 3, -2.0f, 2.0f);
  host_vector<P> hw(n), hb(n);
  for (index_t j = 0; j < n; ++j) hw(j) = fusor::convert<P>(1.0f + 0.001f * float(j % 100)), hb(j) = fusor::convert<P>(0.1f);
  const auto x = on_device(hx);
  const auto w = on_device(hw);
  const auto b = on_device(hb);
  device_matrix<P> y(rows, n);
  device_vector<float> mean(rows), rstd(rows);
  host_matrix<P> want(1, n);
  host_vector<float> hmean(1), hrstd(1);
  fusor::layernorm(want, hmean, hrstd, first_row(hx), hw, hb);
  fusor::layernorm(y, mean, rstd, x, w, b, {}, ex);
  const bool ok = first_row_matches(y, want, 2e-2);
  const double ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::layernorm(y, mean, rstd, x, w, b, {}, ex); });
  print_row("layernorm", name<P>(), rows, n, ms, 2.0 * double(rows * n) * sizeof(P), ok);
  if constexpr (!std::is_same_v<P, float>)
    print_unstaged(
        "layernorm unstaged", name<P>(), rows, n, 2.0 * double(rows * n) * sizeof(P), stream,
        [&] {
          poison(y);
          fusor::layernorm(y, mean, rstd, x, w, b, {}, ex);
          return first_row_matches(y, want, 2e-2);
        },
        [&] { fusor::layernorm(y, mean, rstd, x, w, b, {}, ex); });

  if constexpr (!std::is_same_v<P, float>) {
    const auto hdy = random_matrix<P>(rows, n, 4, -1.0f, 1.0f);
    const auto dy = on_device(hdy);
    device_matrix<P> dx(rows, n);
    device_vector<P> dw(n), db(n);
    host_matrix<P> want_dx(1, n);
    host_vector<P> hdw(n), hdb(n);
    fusor::layernorm_backward(want_dx, hdw, hdb, first_row(hdy),
                              first_row(hx), hw, hmean, hrstd);
    fusor::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex);
    const bool backward_ok = first_row_matches(dx, want_dx, 2e-2);
    const double backward_ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex); });
    print_row("layernorm_backward", name<P>(), rows, n, backward_ms, 3.0 * double(rows * n) * sizeof(P), backward_ok);
    print_unstaged(
        "layernorm_backward unstaged", name<P>(), rows, n, 3.0 * double(rows * n) * sizeof(P), stream,
        [&] {
          poison(dx);
          fusor::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex);
          return first_row_matches(dx, want_dx, 2e-2);
        },
        [&] { fusor::layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex); });
  }
}

// bf16 logits, gradient written in place, mean over rows (two launches: the
// count of targets, then the rows).
void cross_entropy_rows(index_t rows, index_t n, cudaStream_t stream) {
  using P = fusor::bfloat16;
  const fusor::cuda_executor ex{stream};
  const auto hx = random_matrix<P>(rows, n, 5, -6.0f, 6.0f);
  host_vector<int> ht(rows);
  for (index_t r = 0; r < rows; ++r) ht(r) = int((r * 7919) % n);
  const auto pristine = on_device(hx);
  const auto t = on_device(ht);
  device_matrix<P> logits(rows, n);
  device_vector<float> losses(rows);
  host_matrix<P> want(1, n);
  host_vector<float> hloss(1);
  host_vector<int> ht0(1);
  ht0(0) = ht(0);
  fusor::cross_entropy(hloss, want, first_row(hx), ht0,
                       {.reduction = fusor::loss_reduction::sum, .grad_scale = 1.0f / float(rows)});
  fusor::copy(logits, pristine);
  fusor::cross_entropy(losses, logits, logits, t, {}, ex);
  const bool ok = first_row_matches(logits, want, 2e-2);
  // In place: after the first run the logits hold gradients, which is as much
  // work for the kernel as logits are.
  const double ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] { fusor::cross_entropy(losses, logits, logits, t, {}, ex); });
  print_row("cross_entropy (fused)", "bf16", rows, n, ms, 2.0 * double(rows * n) * sizeof(P), ok);
  print_unstaged(
      "cross_entropy unstaged", "bf16", rows, n, 2.0 * double(rows * n) * sizeof(P), stream,
      [&] {
        fusor::copy(logits, pristine);
        fusor::cross_entropy(losses, logits, logits, t, {}, ex);
        return first_row_matches(logits, want, 2e-2);
      },
      [&] { fusor::cross_entropy(losses, logits, logits, t, {}, ex); });
}

}  // namespace

int main() {
  if (!fusor::gpu::available()) {
    std::printf("skipped: no GPU\n");
    return 77;
  }
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaDeviceProp properties{};
  FUSOR_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  {
    const std::size_t bytes = std::size_t(elements) * sizeof(float);
    fusor::buffer<fusor::device_space> a(bytes, stream), b(bytes, stream);
    FUSOR_CUDA_CHECK(cudaMemsetAsync(a.data(), 0, bytes, stream));
    const double ms = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] {
      FUSOR_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    });
    copy_gbps = 2.0 * double(bytes) / ms * 1e-6;
  }
  std::printf("%s; copy bandwidth (cudaMemcpy D2D, 256 MiB, read + write) %.0f GB/s\n\n", properties.name, copy_gbps);
  std::printf("| kernel | prec | rows x n | ms | GB/s | / copy | checked |\n|---|---|---|---:|---:|---:|---|\n");
  for (const index_t n :
       {index_t(4096), index_t(8192), index_t(32768), index_t(50257), index_t(50304), index_t(131072)}) {
    const index_t rows = elements / n;
    softmax_rows<float>(rows, n, stream);
    softmax_rows<fusor::bfloat16>(rows, n, stream);
    layernorm_rows<float>(rows, n, stream);
    layernorm_rows<fusor::bfloat16>(rows, n, stream);
    cross_entropy_rows(rows, n, stream);
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
  goals.print();
  return all_correct ? 0 : 1;
}
