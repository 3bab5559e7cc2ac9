// fusor/kernels/attention_cuda_tiles.hpp — the building blocks of the CUDA
// attention kernels (attention_cuda.hpp): tile shapes per data type and head
// size, warp products of 16 rows (WMMA on tensor cores for bf16/fp16, an FMA
// loop for fp32/fp64), tiles loaded from and accumulators stored to global
// memory, and the shared-memory layout of a block.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>
#include <mma.h>

#include <cstddef>
#include <type_traits>

#include "fusor/core/precision.hpp"
#include "fusor/kernels/attention_operands.hpp"

namespace fusor::detail {

// ---- tile shapes ---------------------------------------------------------------------------------
// T: the type tiles hold in shared memory (the data type: bf16/fp16 feed the
// tensor cores, fp32/fp64 the FMA loop); S: what products accumulate and the
// softmax computes in. Dp: the head size padded to a multiple of 16.
template <class T, int Dp>
struct attention_tiles {
  static constexpr bool tensor_cores = sizeof(T) == 2;
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
  static constexpr int warps = tensor_cores ? 4 : (sizeof(T) == 4 ? 2 : 1);
  static constexpr int threads = 32 * warps;
  static constexpr int rows = 16 * warps;  // queries (forward, dQ) or keys (dK, dV) of a block
  // Rows of the tiles a block walks through (keys, or queries for dK and dV).
  static constexpr int tile = tensor_cores ? (Dp <= 64 ? 64 : 32) : (sizeof(T) == 4 ? 32 : 16);
  static constexpr int pad = tensor_cores ? 8 : 1;  // WMMA wants 16-byte rows; the FMA loop odd ones
  static constexpr int ld = Dp + pad;               // row stride of a tile of T
  static constexpr int ld_scores = tile + 4;        // of a warp's fp32 scores (16 x tile)
  static constexpr int ld_probabilities = tile + pad;
  static constexpr int ld_accumulator = Dp + 4;  // of a warp's accumulator (16 x Dp)
};

// Bytes of dynamic shared memory, laid out by attention_shared below: each piece 128-byte aligned.
FUSOR_HOST_DEVICE constexpr std::size_t attention_align(std::size_t bytes) { return (bytes + 127) / 128 * 128; }

// A bump allocator over dynamic shared memory.
struct attention_shared {
  unsigned char* next;
  template <class U>
  __device__ U* take(std::size_t count) {
    U* p = reinterpret_cast<U*>(next);
    next += attention_align(count * sizeof(U));
    return p;
  }
};

// ---- warp products -------------------------------------------------------------------------------
// C (16 x n, S, row stride ldc) (+)= A (16 x k, T, row-major) op(B), where
// op(B)[p][c] = B[p * ldb + c], or B[c * ldb + p] when BTransposed (B's rows
// are the columns of the product: K or V tiles as stored). n and k are
// multiples of 16; every pointer is 32-byte aligned and every ld a multiple of
// 16 bytes on the tensor-core path.
template <bool Accumulate, bool BTransposed, class T, class S>
__device__ FUSOR_FORCE_INLINE void warp_product_fma(S* c, int ldc, const T* a, int lda, const T* b, int ldb, int n,
                                                    int k) {
  const int lane = int(threadIdx.x) & 31, r = lane & 15, half = lane >> 4;
  // Lane (r, half) owns row r, columns half, half + 2, ...: the 16 lanes of a
  // half read one B element at a time (a broadcast) and 16 rows of A.
  for (int c0 = half; c0 < n; c0 += 16) {
    S acc[8];
    FUSOR_UNROLL
    for (int u = 0; u < 8; ++u) acc[u] = Accumulate ? c[r * ldc + c0 + 2 * u] : S(0);
    for (int p = 0; p < k; ++p) {
      const S x = convert<S>(a[r * lda + p]);
      FUSOR_UNROLL
      for (int u = 0; u < 8; ++u) {
        const int col = c0 + 2 * u;
        acc[u] += x * convert<S>(BTransposed ? b[col * ldb + p] : b[p * ldb + col]);
      }
    }
    FUSOR_UNROLL
    for (int u = 0; u < 8; ++u) c[r * ldc + c0 + 2 * u] = acc[u];
  }
}

template <bool Accumulate, bool BTransposed, class T>
__device__ FUSOR_FORCE_INLINE void warp_product_wmma(float* c, int ldc, const T* a, int lda, const T* b, int ldb, int n,
                                                     int k) {
  namespace wmma = nvcuda::wmma;
  using b_layout = std::conditional_t<BTransposed, wmma::col_major, wmma::row_major>;
  for (int c0 = 0; c0 < n; c0 += 16) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if constexpr (Accumulate)
      wmma::load_matrix_sync(acc, c + c0, unsigned(ldc), wmma::mem_row_major);
    else
      wmma::fill_fragment(acc, 0.0f);
    for (int p = 0; p < k; p += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a_fragment;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, b_layout> b_fragment;
      wmma::load_matrix_sync(a_fragment, a + p, unsigned(lda));
      wmma::load_matrix_sync(b_fragment, BTransposed ? b + c0 * ldb + p : b + p * ldb + c0, unsigned(ldb));
      wmma::mma_sync(acc, a_fragment, b_fragment, acc);
    }
    wmma::store_matrix_sync(c + c0, acc, unsigned(ldc), wmma::mem_row_major);
  }
}

template <bool Accumulate, bool BTransposed, class T, class S>
__device__ FUSOR_FORCE_INLINE void warp_product(S* c, int ldc, const T* a, int lda, const T* b, int ldb, int n, int k) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr bool wmma_types = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  constexpr bool wmma_types = std::is_same_v<T, float16>;
#else
  constexpr bool wmma_types = false;
#endif
  if constexpr (wmma_types && std::is_same_v<S, float>)
    warp_product_wmma<Accumulate, BTransposed>(c, ldc, a, lda, b, ldb, n, k);
  else
    warp_product_fma<Accumulate, BTransposed>(c, ldc, a, lda, b, ldb, n, k);
  __syncwarp();
}

// ---- tiles from global memory ----------------------------------------------------------------------
// `count` rows of one head from position t0 (rows past the sequence and
// columns past d are zero) into a tile of Cfg::ld columns, by the whole block.
template <class Cfg, int Dp, class T, class In>
__device__ FUSOR_FORCE_INLINE void load_tile(T* tile, int count, const attention_rows<In>& in, index_t b, index_t t0,
                                             index_t time, index_t column, int d) {
  for (int e = int(threadIdx.x); e < count * Dp; e += Cfg::threads) {
    const int r = e / Dp, x = e % Dp;
    const index_t t = t0 + r;
    tile[r * Cfg::ld + x] = (t < time && x < d) ? convert<T>(in.row(b, t)[column + x]) : convert<T>(0.0f);
  }
}

// A warp's 16 x Dp accumulator: written to rows of the output (times `scale`)
// by the lanes (row r, the half of the columns of `half`).
template <class Cfg, int Dp, class Out, class S>
__device__ FUSOR_FORCE_INLINE void store_accumulator(const attention_rows<Out>& out, const S* acc, index_t b, index_t t,
                                                     index_t time, index_t column, int d, S scale) {
  const int lane = int(threadIdx.x) & 31, r = lane & 15, half = lane >> 4;
  if (t + r >= time) return;
  Out* row = out.row(b, t + r) + column;
  for (int x = half; x < d; x += 2) row[x] = convert<Out>(acc[r * Cfg::ld_accumulator + x] * scale);
}

template <class U>
__device__ FUSOR_FORCE_INLINE U attention_max(U a, U b) {
  return a > b ? a : b;  // -inf stays -inf: no NaN reaches the softmax
}
template <class S>
__device__ FUSOR_FORCE_INLINE S attention_exp(S x) {
  if constexpr (std::is_same_v<S, double>)
    return ::exp(x);
  else
    return ::expf(x);
}

}  // namespace fusor::detail

#endif  // FUSOR_HAS_CUDA
