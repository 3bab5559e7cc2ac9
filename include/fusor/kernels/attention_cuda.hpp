// fusor/kernels/attention_cuda.hpp — the CUDA kernels of causal attention
// (attention.hpp): a fused flash-attention forward and backward.
//
// bf16 and fp16 on sm_80 and later: attention_flash.hpp's forward and
// attention_flash_backward.hpp's backward, their tiles in registers, where
// they take the operands (heads a multiple of 8 columns, 16-byte aligned
// rows). Otherwise (fp32, fp64, other heads, older GPUs) this file's kernels.
// Forward (FlashAttention-2): a thread block takes `rows` queries of one head
// (16 per warp), keeps them in shared memory and walks the key/value tiles up
// to the diagonal through shared memory with an online softmax (running
// maximum and sum per row, fp32); the T x T matrix is never formed.
// Backward, without atomics, so deterministic: one kernel per key block (dK
// and dV of a key/value head, summed over its group's query heads and the
// query tiles at and after the diagonal) and one per query block (dQ over the
// key tiles up to the diagonal), both recomputing P = exp(S - lse) tile by
// tile, after a small kernel that forms delta = rowsum(dY * Y) (shared with
// the kernels in registers).
//
// Block products are warp products of 16 rows: on tensor cores (WMMA
// 16 x 16 x 16, fp32 accumulation) for bf16 (sm_80 and later) and fp16
// (sm_70 and later) data, with P and dS rounded to the data type before their
// products as FlashAttention does; a plain FMA loop over shared memory for
// fp32 and fp64 data (fp32 and fp64 arithmetic). Accumulators (O, dQ, dK, dV)
// live in shared memory, where the softmax's per-row rescaling can reach them.
//
// Expected limits: head_dim up to 128 (padded to 16, 32, 64 or 128 in shared
// memory). A block takes 14 to 146 KiB of shared memory (bf16 at head_dim 128,
// the key-gradient kernel), within sm_80's and sm_90's opt-in limits; on
// devices with 99 KiB a block (sm_86, sm_89) the backward stops at head_dim
// 32 in bf16/fp16 and 64 in fp32, with an error naming the sizes. One or two
// blocks of 64 to 128 threads share a multiprocessor, the tiles are small and
// the accumulators go through shared memory, so this reaches a fraction of
// what FlashAttention-2's register-resident kernels do: it is written to be
// simple and correct first (0.20-0.26x PyTorch's forward, 0.07-0.12x its
// forward and backward, H200), and is now the fallback of the bf16/fp16
// kernels in registers.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/attention_cuda_tiles.hpp"
#include "fusor/kernels/attention_flash.hpp"
#include "fusor/kernels/attention_flash_backward.hpp"
#include "fusor/kernels/attention_flash_delta.hpp"
#include "fusor/kernels/attention_operands.hpp"
#include "fusor/kernels/row_reduce.hpp"

namespace fusor::detail {

// ---- forward --------------------------------------------------------------------------------------
template <int Dp, class Y, class L, class QKV>
__global__ void __launch_bounds__(attention_tiles<QKV, Dp>::threads)
    attention_forward_kernel(const attention_forward<Y, L, QKV> f) {
  using Cfg = attention_tiles<QKV, Dp>;
  using T = QKV;
  using S = typename Cfg::S;
  constexpr int N = Cfg::tile;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const attention_geometry& g = f.shape;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) & 31, r = lane & 15, half = lane >> 4;
  const index_t bh = blockIdx.x, b = bh / g.heads, h = bh % g.heads, kv = h / g.group();
  const index_t q0 = (index_t(gridDim.y) - 1 - blockIdx.y) * Cfg::rows;  // the longest blocks first
  const int d = int(g.head_dim);
  const S scale = S(1) / ::cuda::std::sqrt(S(d));

  attention_shared shared{shared_bytes};
  T* q_tile = shared.take<T>(Cfg::rows * Cfg::ld);
  T* k_tile = shared.take<T>(N * Cfg::ld);
  T* v_tile = shared.take<T>(N * Cfg::ld);
  S* scores = shared.take<S>(Cfg::warps * 16 * Cfg::ld_scores) + warp * 16 * Cfg::ld_scores;
  T* probabilities = shared.take<T>(Cfg::warps * 16 * Cfg::ld_probabilities) + warp * 16 * Cfg::ld_probabilities;
  S* o = shared.take<S>(Cfg::warps * 16 * Cfg::ld_accumulator) + warp * 16 * Cfg::ld_accumulator;

  load_tile<Cfg, Dp>(q_tile, Cfg::rows, f.qkv, b, q0, g.time, g.query_column(h), d);
  for (int x = half; x < Dp; x += 2) o[r * Cfg::ld_accumulator + x] = S(0);
  const index_t query = q0 + warp * 16 + r;
  S running_max = -::cuda::std::numeric_limits<S>::infinity(), running_sum = 0;

  const index_t last_key = (q0 + Cfg::rows < g.time ? q0 + Cfg::rows : g.time) - 1;
  for (index_t k0 = 0; k0 <= last_key; k0 += N) {
    __syncthreads();  // the previous tiles are used up
    load_tile<Cfg, Dp>(k_tile, N, f.qkv, b, k0, g.time, g.key_column(kv), d);
    load_tile<Cfg, Dp>(v_tile, N, f.qkv, b, k0, g.time, g.value_column(kv), d);
    __syncthreads();
    warp_product<false, true>(scores, Cfg::ld_scores, q_tile + warp * 16 * Cfg::ld, Cfg::ld, k_tile, Cfg::ld, N, Dp);

    // Lane (r, half): row r, columns half * N / 2 + [0, N / 2).
    S* row = scores + r * Cfg::ld_scores + half * (N / 2);
    S tile_max = -::cuda::std::numeric_limits<S>::infinity();
    for (int c = 0; c < N / 2; ++c) {
      const index_t key = k0 + half * (N / 2) + c;
      const S s = key <= query ? row[c] * scale : -::cuda::std::numeric_limits<S>::infinity();
      row[c] = s;
      tile_max = attention_max(tile_max, s);
    }
    tile_max = attention_max(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
    const S new_max = attention_max(running_max, tile_max);  // finite: key 0 is in the first tile
    S sum = 0;
    T* p_row = probabilities + r * Cfg::ld_probabilities + half * (N / 2);
    for (int c = 0; c < N / 2; ++c) {
      const S p = attention_exp(row[c] - new_max);
      p_row[c] = convert<T>(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    const S correction = attention_exp(running_max - new_max);
    running_sum = running_sum * correction + sum;
    running_max = new_max;
    for (int x = half; x < Dp; x += 2) o[r * Cfg::ld_accumulator + x] *= correction;
    __syncwarp();
    warp_product<true, false>(o, Cfg::ld_accumulator, probabilities, Cfg::ld_probabilities, v_tile, Cfg::ld, Dp, N);
  }
  store_accumulator<Cfg, Dp>(f.y, o, b, q0 + warp * 16, g.time, g.query_column(h), d, S(1) / running_sum);
  if (half == 0 && query < g.time) f.lse.at(b, h, query) = convert<L>(running_max + ::cuda::std::log(running_sum));
}

// ---- backward ------------------------------------------------------------------------------------
// delta[(b H + h) T + t] = sum over the head's columns of dY * Y: a warp per row.
template <class DQKV, class DY, class QKV, class Y, class L, class S>
__global__ void attention_delta_kernel(const attention_backward<DQKV, DY, QKV, Y, L> w, S* delta) {
  const attention_geometry& g = w.shape;
  const index_t rows = g.batch * g.heads * g.time;
  const int lane = int(threadIdx.x) & 31;
  for (index_t n = (index_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; n < rows;
       n += index_t(gridDim.x) * blockDim.x / 32) {
    const index_t t = n % g.time, bh = n / g.time, b = bh / g.heads, h = bh % g.heads;
    const DY* dy = w.dy.row(b, t) + g.query_column(h);
    const Y* y = w.y.row(b, t) + g.query_column(h);
    S sum = 0;
    for (index_t x = lane; x < g.head_dim; x += 32) sum += convert<S>(dy[x]) * convert<S>(y[x]);
    FUSOR_UNROLL
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) delta[n] = sum;
  }
}

// dK and dV of `rows` keys of one key/value head: every query head of its
// group, every query tile from the diagonal on.
template <int Dp, class DQKV, class DY, class QKV, class Y, class L>
__global__ void __launch_bounds__(attention_tiles<QKV, Dp>::threads)
    attention_key_gradient_kernel(const attention_backward<DQKV, DY, QKV, Y, L> w,
                                  const typename attention_tiles<QKV, Dp>::S* delta) {
  using Cfg = attention_tiles<QKV, Dp>;
  using T = QKV;
  using S = typename Cfg::S;
  constexpr int N = Cfg::tile;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const attention_geometry& g = w.shape;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) & 31, r = lane & 15, half = lane >> 4;
  const index_t bg = blockIdx.x, b = bg / g.kv_heads, kv = bg % g.kv_heads;
  const index_t k0 = index_t(blockIdx.y) * Cfg::rows;
  const int d = int(g.head_dim);
  const S scale = S(1) / ::cuda::std::sqrt(S(d));

  attention_shared shared{shared_bytes};
  T* k_tile = shared.take<T>(Cfg::rows * Cfg::ld);
  T* v_tile = shared.take<T>(Cfg::rows * Cfg::ld);
  T* q_tile = shared.take<T>(N * Cfg::ld);
  T* dy_tile = shared.take<T>(N * Cfg::ld);
  S* lse = shared.take<S>(N);
  S* delta_tile = shared.take<S>(N);
  const int warp_scores = 16 * Cfg::ld_scores, warp_probabilities = 16 * Cfg::ld_probabilities,
            warp_accumulator = 16 * Cfg::ld_accumulator;
  S* scores = shared.take<S>(Cfg::warps * warp_scores) + warp * warp_scores;                       // S^T
  S* score_gradients = shared.take<S>(Cfg::warps * warp_scores) + warp * warp_scores;              // dP^T
  T* probabilities = shared.take<T>(Cfg::warps * warp_probabilities) + warp * warp_probabilities;  // P^T
  T* gradients = shared.take<T>(Cfg::warps * warp_probabilities) + warp * warp_probabilities;      // dS^T
  S* dk = shared.take<S>(Cfg::warps * warp_accumulator) + warp * warp_accumulator;
  S* dv = shared.take<S>(Cfg::warps * warp_accumulator) + warp * warp_accumulator;

  load_tile<Cfg, Dp>(k_tile, Cfg::rows, w.qkv, b, k0, g.time, g.key_column(kv), d);
  load_tile<Cfg, Dp>(v_tile, Cfg::rows, w.qkv, b, k0, g.time, g.value_column(kv), d);
  for (int x = half; x < Dp; x += 2) dk[r * Cfg::ld_accumulator + x] = dv[r * Cfg::ld_accumulator + x] = S(0);
  const index_t key = k0 + warp * 16 + r;

  for (index_t h = kv * g.group(); h < (kv + 1) * g.group(); ++h) {
    for (index_t t0 = k0 / N * N; t0 < g.time; t0 += N) {
      __syncthreads();  // the previous tiles are used up
      load_tile<Cfg, Dp>(q_tile, N, w.qkv, b, t0, g.time, g.query_column(h), d);
      load_tile<Cfg, Dp>(dy_tile, N, w.dy, b, t0, g.time, g.query_column(h), d);
      for (int c = int(threadIdx.x); c < N; c += Cfg::threads) {
        const index_t t = t0 + c;
        lse[c] = t < g.time ? convert<S>(w.lse.at(b, h, t)) : S(0);
        delta_tile[c] = t < g.time ? delta[(b * g.heads + h) * g.time + t] : S(0);
      }
      __syncthreads();
      const T* k_rows = k_tile + warp * 16 * Cfg::ld;
      const T* v_rows = v_tile + warp * 16 * Cfg::ld;
      warp_product<false, true>(scores, Cfg::ld_scores, k_rows, Cfg::ld, q_tile, Cfg::ld, N, Dp);            // K Q^T
      warp_product<false, true>(score_gradients, Cfg::ld_scores, v_rows, Cfg::ld, dy_tile, Cfg::ld, N, Dp);  // V dY^T
      // Lane (r, half): key row r, queries half * N / 2 + [0, N / 2).
      for (int c = half * (N / 2); c < (half + 1) * (N / 2); ++c) {
        const index_t query = t0 + c;
        const bool visible = key <= query && query < g.time;
        const S p = visible ? attention_exp(scores[r * Cfg::ld_scores + c] * scale - lse[c]) : S(0);
        const S ds = p * (score_gradients[r * Cfg::ld_scores + c] - delta_tile[c]);
        probabilities[r * Cfg::ld_probabilities + c] = convert<T>(p);
        gradients[r * Cfg::ld_probabilities + c] = convert<T>(ds);
      }
      __syncwarp();
      warp_product<true, false>(dv, Cfg::ld_accumulator, probabilities, Cfg::ld_probabilities, dy_tile, Cfg::ld, Dp, N);
      warp_product<true, false>(dk, Cfg::ld_accumulator, gradients, Cfg::ld_probabilities, q_tile, Cfg::ld, Dp, N);
    }
  }
  store_accumulator<Cfg, Dp>(w.dqkv, dk, b, k0 + warp * 16, g.time, g.key_column(kv), d, scale);
  store_accumulator<Cfg, Dp>(w.dqkv, dv, b, k0 + warp * 16, g.time, g.value_column(kv), d, S(1));
}

// dQ of `rows` queries of one head: every key tile up to the diagonal.
template <int Dp, class DQKV, class DY, class QKV, class Y, class L>
__global__ void __launch_bounds__(attention_tiles<QKV, Dp>::threads)
    attention_query_gradient_kernel(const attention_backward<DQKV, DY, QKV, Y, L> w,
                                    const typename attention_tiles<QKV, Dp>::S* delta) {
  using Cfg = attention_tiles<QKV, Dp>;
  using T = QKV;
  using S = typename Cfg::S;
  constexpr int N = Cfg::tile;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  const attention_geometry& g = w.shape;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) & 31, r = lane & 15, half = lane >> 4;
  const index_t bh = blockIdx.x, b = bh / g.heads, h = bh % g.heads, kv = h / g.group();
  const index_t q0 = (index_t(gridDim.y) - 1 - blockIdx.y) * Cfg::rows;
  const int d = int(g.head_dim);
  const S scale = S(1) / ::cuda::std::sqrt(S(d));

  attention_shared shared{shared_bytes};
  T* q_tile = shared.take<T>(Cfg::rows * Cfg::ld);
  T* dy_tile = shared.take<T>(Cfg::rows * Cfg::ld);
  T* k_tile = shared.take<T>(N * Cfg::ld);
  T* v_tile = shared.take<T>(N * Cfg::ld);
  const int warp_scores = 16 * Cfg::ld_scores, warp_probabilities = 16 * Cfg::ld_probabilities,
            warp_accumulator = 16 * Cfg::ld_accumulator;
  S* scores = shared.take<S>(Cfg::warps * warp_scores) + warp * warp_scores;
  S* score_gradients = shared.take<S>(Cfg::warps * warp_scores) + warp * warp_scores;
  T* gradients = shared.take<T>(Cfg::warps * warp_probabilities) + warp * warp_probabilities;  // dS
  S* dq = shared.take<S>(Cfg::warps * warp_accumulator) + warp * warp_accumulator;

  load_tile<Cfg, Dp>(q_tile, Cfg::rows, w.qkv, b, q0, g.time, g.query_column(h), d);
  load_tile<Cfg, Dp>(dy_tile, Cfg::rows, w.dy, b, q0, g.time, g.query_column(h), d);
  for (int x = half; x < Dp; x += 2) dq[r * Cfg::ld_accumulator + x] = S(0);
  const index_t query = q0 + warp * 16 + r;
  const S row_lse = query < g.time ? convert<S>(w.lse.at(b, h, query)) : S(0);
  const S row_delta = query < g.time ? delta[(b * g.heads + h) * g.time + query] : S(0);

  const index_t last_key = (q0 + Cfg::rows < g.time ? q0 + Cfg::rows : g.time) - 1;
  for (index_t k0 = 0; k0 <= last_key; k0 += N) {
    __syncthreads();
    load_tile<Cfg, Dp>(k_tile, N, w.qkv, b, k0, g.time, g.key_column(kv), d);
    load_tile<Cfg, Dp>(v_tile, N, w.qkv, b, k0, g.time, g.value_column(kv), d);
    __syncthreads();
    warp_product<false, true>(scores, Cfg::ld_scores, q_tile + warp * 16 * Cfg::ld, Cfg::ld, k_tile, Cfg::ld, N, Dp);
    warp_product<false, true>(score_gradients, Cfg::ld_scores, dy_tile + warp * 16 * Cfg::ld, Cfg::ld, v_tile, Cfg::ld,
                              N, Dp);
    for (int c = half * (N / 2); c < (half + 1) * (N / 2); ++c) {
      const bool visible = k0 + c <= query && query < g.time;
      const S p = visible ? attention_exp(scores[r * Cfg::ld_scores + c] * scale - row_lse) : S(0);
      gradients[r * Cfg::ld_probabilities + c] = convert<T>(p * (score_gradients[r * Cfg::ld_scores + c] - row_delta));
    }
    __syncwarp();
    warp_product<true, false>(dq, Cfg::ld_accumulator, gradients, Cfg::ld_probabilities, k_tile, Cfg::ld, Dp, N);
  }
  store_accumulator<Cfg, Dp>(w.dqkv, dq, b, q0 + warp * 16, g.time, g.query_column(h), d, scale);
}

// ---- launches -------------------------------------------------------------------------------------
template <class T, int Dp>
constexpr std::size_t attention_forward_shared_bytes() {
  using Cfg = attention_tiles<T, Dp>;
  using S = typename Cfg::S;
  return attention_align(Cfg::rows * Cfg::ld * sizeof(T)) + 2 * attention_align(Cfg::tile * Cfg::ld * sizeof(T)) +
         attention_align(Cfg::warps * 16 * Cfg::ld_scores * sizeof(S)) +
         attention_align(Cfg::warps * 16 * Cfg::ld_probabilities * sizeof(T)) +
         attention_align(Cfg::warps * 16 * Cfg::ld_accumulator * sizeof(S));
}
template <class T, int Dp>
constexpr std::size_t attention_key_gradient_shared_bytes() {
  using Cfg = attention_tiles<T, Dp>;
  using S = typename Cfg::S;
  return 2 * attention_align(Cfg::rows * Cfg::ld * sizeof(T)) + 2 * attention_align(Cfg::tile * Cfg::ld * sizeof(T)) +
         2 * attention_align(Cfg::tile * sizeof(S)) +
         2 * attention_align(Cfg::warps * 16 * Cfg::ld_scores * sizeof(S)) +
         2 * attention_align(Cfg::warps * 16 * Cfg::ld_probabilities * sizeof(T)) +
         2 * attention_align(Cfg::warps * 16 * Cfg::ld_accumulator * sizeof(S));
}
template <class T, int Dp>
constexpr std::size_t attention_query_gradient_shared_bytes() {
  using Cfg = attention_tiles<T, Dp>;
  using S = typename Cfg::S;
  return 2 * attention_align(Cfg::rows * Cfg::ld * sizeof(T)) + 2 * attention_align(Cfg::tile * Cfg::ld * sizeof(T)) +
         2 * attention_align(Cfg::warps * 16 * Cfg::ld_scores * sizeof(S)) +
         attention_align(Cfg::warps * 16 * Cfg::ld_probabilities * sizeof(T)) +
         attention_align(Cfg::warps * 16 * Cfg::ld_accumulator * sizeof(S));
}

// Launches Kernel over grid (x, y) with `shared_bytes` of dynamic shared
// memory, raising the kernel's limit past 48 KiB where the device allows it.
template <auto Kernel, class... Args>
void launch_attention_kernel(const char* what, index_t x, index_t y, int threads, std::size_t shared_bytes,
                             cudaStream_t stream, const Args&... args) {
  // A kernel's static shared memory is fixed when it is compiled: asked once.
  static const std::size_t static_bytes = gpu::static_shared_bytes(Kernel);
  int device = 0, limit = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (shared_bytes + static_bytes > std::size_t(limit))
    throw error(std::string("fusor: ") + what + " needs " + std::to_string(shared_bytes + static_bytes) +
                " bytes of shared memory per block at this head size and type; this device allows " +
                std::to_string(limit));
  if (x > 0x7fffffff || y > 65535)
    throw error(
        std::string("fusor: ") + what + ": " + std::to_string(x) + " x " + std::to_string(y) +
        " blocks are more than a CUDA grid holds (batch x heads up to 2^31 - 1, blocks of positions up to 65535)");
  gpu::allow_dynamic_shared(Kernel, shared_bytes, static_bytes);
  Kernel<<<dim3(unsigned(x), unsigned(y)), threads, shared_bytes, stream>>>(args...);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}

// The tensor-core forward (attention_flash.hpp) where it takes the operands
// and its code for this GPU is sm_80 or newer; false where it did not launch.
// KeysUpTo64: flash_tiles' key tiles at heads up to 64 (the benchmark builds 128 too).
template <int KeysUpTo64 = 64, class Y, class L, class QKV>
bool attention_forward_flash_cuda(const attention_forward<Y, L, QKV>& f, const cuda_executor& ex) {
  if constexpr (std::is_same_v<QKV, bfloat16> || std::is_same_v<QKV, float16>) {
    if (!flash_forward_takes(f)) return false;
    const attention_geometry& g = f.shape;
    bool launched = false;
    with_padded_head_dim("causal_attention", g.head_dim, [&](auto padded) {
      constexpr int D = decltype(padded)::value;
      using tiles = flash_tiles<D, KeysUpTo64>;
      constexpr auto kernel = attention_flash_forward_kernel<D, KeysUpTo64, Y, L, QKV>;
      if (!runs_tensor_core_mma<kernel>()) return;
      launch_attention_kernel<kernel>("causal_attention", g.batch * g.heads, (g.time + tiles::queries - 1) / tiles::queries,
                                      tiles::threads, tiles::template shared_bytes<QKV>(), ex.stream, f);
      launched = true;
    });
    return launched;
  } else {
    (void)f, (void)ex;
    return false;
  }
}

template <class Y, class L, class QKV>
void attention_forward_cuda(const attention_forward<Y, L, QKV>& f, const cuda_executor& ex) {
  gpu::require("causal_attention on the cuda executor");
  const attention_geometry& g = f.shape;
  if (g.batch == 0 || g.time == 0) return;
  if (attention_forward_flash_cuda(f, ex)) return;
  with_padded_head_dim("causal_attention", g.head_dim, [&](auto padded) {
    constexpr int Dp = decltype(padded)::value;
    using Cfg = attention_tiles<QKV, Dp>;
    launch_attention_kernel<attention_forward_kernel<Dp, Y, L, QKV>>(
        "causal_attention", g.batch * g.heads, (g.time + Cfg::rows - 1) / Cfg::rows, Cfg::threads,
        attention_forward_shared_bytes<QKV, Dp>(), ex.stream, f);
  });
}

// The tensor-core backward (attention_flash_backward.hpp) where it takes the
// operands (dy of qkv's type among them) and its code for this GPU is sm_80
// or newer; false where it did not launch.
template <class DQKV, class DY, class QKV, class Y, class L, class S>
bool attention_backward_flash_cuda(const attention_backward<DQKV, DY, QKV, Y, L>& w, const S* delta,
                                   const cuda_executor& ex) {
  if constexpr ((std::is_same_v<QKV, bfloat16> || std::is_same_v<QKV, float16>)&&std::is_same_v<DY, QKV> &&
                std::is_same_v<S, float>) {
    if (!flash_backward_takes(w)) return false;
    const attention_geometry& g = w.shape;
    bool launched = false;
    with_padded_head_dim("causal_attention_backward", g.head_dim, [&](auto padded) {
      constexpr int D = decltype(padded)::value;
      using tiles = flash_backward_tiles<D>;
      constexpr auto keys = attention_flash_key_gradient_kernel<D, DQKV, QKV, Y, L>;
      constexpr auto queries = attention_flash_query_gradient_kernel<D, DQKV, QKV, Y, L>;
      if (!runs_tensor_core_mma<keys>()) return;
      const index_t blocks = (g.time + tiles::rows - 1) / tiles::rows;
      launch_attention_kernel<keys>("causal_attention_backward", g.batch * g.kv_heads, blocks, tiles::threads,
                                    tiles::template key_shared_bytes<QKV>(), ex.stream, w, delta);
      launch_attention_kernel<queries>("causal_attention_backward", g.batch * g.heads, blocks, tiles::threads,
                                       tiles::template query_shared_bytes<QKV>(), ex.stream, w, delta);
      launched = true;
    });
    return launched;
  } else {
    (void)w, (void)delta, (void)ex;
    return false;
  }
}

template <class DQKV, class DY, class QKV, class Y, class L>
void attention_backward_cuda(const attention_backward<DQKV, DY, QKV, Y, L>& w, const cuda_executor& ex) {
  gpu::require("causal_attention_backward on the cuda executor");
  const attention_geometry& g = w.shape;
  if (g.batch == 0 || g.time == 0) return;
  using S = typename attention_tiles<QKV, 16>::S;
  const index_t rows = g.batch * g.heads * g.time;
  buffer<device_space> delta(std::size_t(rows) * sizeof(S), ex.stream);
  // delta = rowsum(dY * Y): 16-byte pieces a thread where dY and Y are 16-bit
  // and aligned (attention_flash_delta.hpp), else a warp a row.
  bool delta_done = false;
  if constexpr (std::is_same_v<S, float> && sizeof(DY) == 2 && sizeof(Y) == 2) {
    if (flash_delta_takes(w)) {
      launch_attention_kernel<attention_flash_delta_kernel<DQKV, DY, QKV, Y, L>>(
          "causal_attention_backward", g.batch * g.heads, flash_delta_grid_y(g.time, g.head_dim), flash_delta_threads,
          0, ex.stream, w, delta.as<float>());
      delta_done = true;
    }
  }
  if (!delta_done) {
    const int delta_grid = int(std::min<index_t>((rows + 7) / 8, index_t(gpu::multiprocessor_count()) * 32));
    launch_kernel<attention_delta_kernel<DQKV, DY, QKV, Y, L, S>>(delta_grid, 256, 0, ex.stream, w, delta.as<S>());
  }
  if (attention_backward_flash_cuda(w, static_cast<const S*>(delta.as<S>()), ex)) return;
  with_padded_head_dim("causal_attention_backward", g.head_dim, [&](auto padded) {
    constexpr int Dp = decltype(padded)::value;
    using Cfg = attention_tiles<QKV, Dp>;
    const index_t blocks = (g.time + Cfg::rows - 1) / Cfg::rows;
    launch_attention_kernel<attention_key_gradient_kernel<Dp, DQKV, DY, QKV, Y, L>>(
        "causal_attention_backward", g.batch * g.kv_heads, blocks, Cfg::threads,
        attention_key_gradient_shared_bytes<QKV, Dp>(), ex.stream, w, static_cast<const S*>(delta.as<S>()));
    launch_attention_kernel<attention_query_gradient_kernel<Dp, DQKV, DY, QKV, Y, L>>(
        "causal_attention_backward", g.batch * g.heads, blocks, Cfg::threads,
        attention_query_gradient_shared_bytes<QKV, Dp>(), ex.stream, w, static_cast<const S*>(delta.as<S>()));
  });
}

}  // namespace fusor::detail

#endif  // FUSOR_HAS_CUDA
