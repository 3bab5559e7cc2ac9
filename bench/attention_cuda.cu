// bench/attention_cuda.cu — fusor's flash attention on the GPU (kernels/
// attention_cuda.hpp; in bf16 the kernels with their tiles in registers,
// attention_flash.hpp and attention_flash_backward.hpp), forward and
// forward + backward, in bf16 at GPT shapes:
// GPT-2 small's (batch 8, T = 1024, 12 heads of 64), a longer context
// (batch 4, T = 2048) and heads of 128 (batch 4, T = 1024, 8 heads).
// bench/attention_torch_gpu.py times PyTorch's scaled_dot_product_attention
// (FlashAttention-2 inside) on the same shapes and card: gpu_check.sh's bench
// phase runs both, so the two tables come from one session.
//
// FLOP/s counts the work causal attention needs, as FlashAttention does:
// 4 B H T^2 D / 2 for the forward and 3.5 times that for forward + backward.
// Before timing, each shape's kernels are checked against the host executor
// in fp32 on the same bf16 inputs, over the first batch item (‖got − want‖ /
// ‖want‖ under 2e-2 for y and dqkv), so a fast wrong answer fails instead of
// winning. Median of 20 timed runs (CUDA events) after 3 warm-up runs.
// A second table times the forward's two key-tile sizes at heads up to 64
// (flash_tiles: 64, the default, and 128, FlashAttention-2's), each checked
// the same way, so one GPU run says which to keep.
// Prints Markdown tables; exits 77 without a GPU, 1 when a check fails.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda_timing.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/kernels/attention.hpp"

namespace {

using fusor::index_t;
using cube_extents = fusor::dextents<index_t, 3>;
template <class P>
using device_cube = fusor::tensor<P, cube_extents, fusor::row_major, fusor::device_space>;
template <class P>
using host_cube = fusor::tensor<P, cube_extents>;
using bf16 = fusor::bfloat16;

constexpr int warmup_runs = 3, timed_runs = 20;

struct shape {
  index_t batch, time, heads, head_dim;
};

host_cube<bf16> random_cube(index_t a, index_t b, index_t c, unsigned seed) {
  host_cube<bf16> h(a, b, c);
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> uniform(-1.5f, 1.5f);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = fusor::convert<bf16>(uniform(engine));
  return h;
}

// ‖got − want‖ / ‖want‖ over the first `count` elements (the first batch item).
template <class P>
double relative_error(const device_cube<P>& got, const host_cube<float>& want, index_t count) {
  host_cube<P> h(got.extents());
  fusor::copy(h, got);
  double diff = 0, norm = 0;
  for (index_t i = 0; i < count; ++i) {
    const double g = fusor::convert<double>(h.data()[i]), w = want.data()[i];
    diff += (g - w) * (g - w), norm += w * w;
  }
  return std::isfinite(diff) ? std::sqrt(diff / norm) : INFINITY;
}

// The first batch item in fp32 on the host: y and dqkv.
void host_reference(const host_cube<bf16>& qkv, const host_cube<bf16>& dy, const shape& s, host_cube<float>& y,
                    host_cube<float>& dqkv) {
  const index_t width = 3 * s.heads * s.head_dim, channels = s.heads * s.head_dim;
  host_cube<float> q(1, s.time, width), d(1, s.time, channels), lse(1, s.heads, s.time);
  for (index_t i = 0; i < q.size(); ++i) q.data()[i] = fusor::convert<float>(qkv.data()[i]);
  for (index_t i = 0; i < d.size(); ++i) d.data()[i] = fusor::convert<float>(dy.data()[i]);
  const fusor::attention_heads heads{s.heads};
  fusor::causal_attention(y, lse, q, heads, fusor::host_executor{8});
  fusor::causal_attention_backward(dqkv, d, q, y, lse, heads, fusor::host_executor{8});
}

// The forward's key tiles at heads up to 64: each size's time and error.
struct key_tile_row {
  std::string shape;
  double ms[2] = {0, 0}, error[2] = {0, 0};
};

bool run(const shape& s, cudaStream_t stream, std::vector<key_tile_row>& key_tiles) {
  const fusor::cuda_executor ex{stream};
  const index_t width = 3 * s.heads * s.head_dim, channels = s.heads * s.head_dim;
  const auto hqkv = random_cube(s.batch, s.time, width, 1), hdy = random_cube(s.batch, s.time, channels, 2);
  device_cube<bf16> qkv(s.batch, s.time, width), dy(s.batch, s.time, channels), y(s.batch, s.time, channels),
      dqkv(s.batch, s.time, width);
  device_cube<float> lse(s.batch, s.heads, s.time);
  fusor::copy(qkv, hqkv);
  fusor::copy(dy, hdy);
  const fusor::attention_heads heads{s.heads};

  host_cube<float> want_y(1, s.time, channels), want_dqkv(1, s.time, width);
  host_reference(hqkv, hdy, s, want_y, want_dqkv);
  fusor::causal_attention(y, lse, qkv, heads, ex);
  fusor::causal_attention_backward(dqkv, dy, qkv, y, lse, heads, ex);
  FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double error_y = relative_error(y, want_y, s.time * channels);
  const double error_dqkv = relative_error(dqkv, want_dqkv, s.time * width);
  const bool ok = error_y < 2e-2 && error_dqkv < 2e-2;

  const double forward = fusor_bench::median_ms(warmup_runs, timed_runs, stream,
                                                [&] { fusor::causal_attention(y, lse, qkv, heads, ex); });
  const double both = fusor_bench::median_ms(warmup_runs, timed_runs, stream, [&] {
    fusor::causal_attention(y, lse, qkv, heads, ex);
    fusor::causal_attention_backward(dqkv, dy, qkv, y, lse, heads, ex);
  });
  const double flops = 4.0 * double(s.batch * s.heads) * double(s.time) * double(s.time) * double(s.head_dim) / 2;
  bool tiles_ok = true;
  if (s.head_dim <= 64) {
    key_tile_row row;
    row.shape = std::to_string(s.batch) + " x " + std::to_string(s.time) + " x " + std::to_string(s.heads) + " x " +
                std::to_string(s.head_dim);
    const auto f = fusor::detail::attention_forward_operands(y.view(), lse.view(), qkv.view(), heads);
    auto time_keys = [&](auto keys, int at) {
      constexpr int K = decltype(keys)::value;
      // y poisoned first (0xffff: NaN in bf16), so an element the variant does not write shows.
      FUSOR_CUDA_CHECK(cudaMemsetAsync(y.data(), 0xff, std::size_t(y.size()) * sizeof(bf16), stream));
      tiles_ok = fusor::detail::attention_forward_flash_cuda<K>(f, ex) && tiles_ok;  // false: it did not launch
      FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream));
      row.error[at] = relative_error(y, want_y, s.time * channels);
      tiles_ok = row.error[at] < 2e-2 && tiles_ok;
      row.ms[at] = fusor_bench::median_ms(warmup_runs, timed_runs, stream,
                                          [&] { fusor::detail::attention_forward_flash_cuda<K>(f, ex); });
    };
    time_keys(std::integral_constant<int, 64>{}, 0);
    time_keys(std::integral_constant<int, 128>{}, 1);
    key_tiles.push_back(row);
  }
  std::printf("| %lld x %lld x %lld x %lld | %8.3f | %6.1f | %8.3f | %6.1f | %.1e / %.1e %s |\n", (long long)s.batch,
              (long long)s.time, (long long)s.heads, (long long)s.head_dim, forward, flops / forward * 1e-9, both,
              3.5 * flops / both * 1e-9, error_y, error_dqkv, ok ? "ok" : "WRONG");
  return ok && tiles_ok;
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
  std::printf("fusor causal attention, bf16, on %s\n\n", properties.name);
  std::printf("| B x T x heads x head_dim | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | error y / dqkv |\n"
              "|---|---:|---:|---:|---:|---|\n");
  bool ok = true;
  std::vector<key_tile_row> key_tiles;
  for (const shape& s : {shape{8, 1024, 12, 64}, shape{4, 2048, 12, 64}, shape{4, 1024, 8, 128}})
    ok = run(s, stream, key_tiles) && ok;
  std::printf("\nForward key tiles at heads up to 64 (flash_tiles' KeysUpTo64; above 1: 128 faster)\n\n"
              "| B x T x heads x head_dim | keys 64 ms | keys 128 ms | 64 / 128 | error y (64 / 128) |\n"
              "|---|---:|---:|---:|---|\n");
  for (const key_tile_row& r : key_tiles)
    std::printf("| %s | %8.3f | %8.3f | %5.2f | %.1e / %.1e %s |\n", r.shape.c_str(), r.ms[0], r.ms[1],
                r.ms[0] / r.ms[1], r.error[0], r.error[1], r.error[0] < 2e-2 && r.error[1] < 2e-2 ? "ok" : "WRONG");
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
  return ok ? 0 : 1;
}
