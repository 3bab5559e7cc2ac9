// fusor/kernels/attention_flash.hpp — causal attention's forward pass with
// its tiles in registers (FlashAttention-2's layout) for bf16 and fp16 data
// on sm_80 and later, and the building blocks its backward shares
// (attention_flash_backward.hpp): written once against a Simt policy
// (warp_mma.hpp), so the same code runs on the GPU (device_simt) and, in the
// host tests, on the CPU (emulated_simt, simt_emulator.hpp).
//
// A block of four warps takes 128 queries of one head; each warp keeps its
// 32 queries' output rows (fp32) and the running max and sum of its rows in
// registers. For each tile of 64 keys (32 at head_dim 128) up to the
// diagonal, the block copies K and V into shared memory (cp.async in two
// stages: the next tile's copies in flight while this one is used); each
// warp forms S = Q K^T (32 x 64 or 32 x 32) with mma.m16n8k16 from
// ldmatrix'd Q and K, applies the causal mask on the diagonal's tiles,
// updates its online softmax, rounds P to the data type (as FlashAttention
// does) and adds P V into its output registers: P goes from accumulator to
// operand registers without passing through memory.
// The kernel it replaces (attention_cuda.hpp, still used for fp32/fp64 data
// and operands this one does not take) kept its accumulators in shared memory.
//
// Operands taken (flash_forward_takes): head_dim a multiple of 8 up to 128
// (padded to 16, 32, 64 or 128 with zero columns), qkv's rows and head
// columns 16-byte aligned. The output's rounding matches the old kernel's
// (P rounded to the data type before its product, fp32 sums).
//
// Not yet measured on a GPU. Known headroom: sm_90's wgmma is not used.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/config.hpp"
#include "fusor/kernels/attention_operands.hpp"
#include "fusor/kernels/warp_mma.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/launch_shape.hpp"
#endif

namespace fusor::detail {

// The most shared memory a block of these kernels takes: the 99 KiB a block
// of sm_86 and sm_89 may have (sm_80: 163, sm_90: 227).
inline constexpr std::size_t flash_shared_limit = 99 * 1024;

// Shapes of a block for head_dim padded to D. KeysUpTo64: the forward's key
// tiles where D <= 64, 64 by default; 128 (FlashAttention-2's choice at
// head_dim 64: fewer barriers and Q fragments a key, more masked work on the
// diagonal) is built beside it for the GPU benchmark to compare.
template <int D, int KeysUpTo64 = 64>
struct flash_tiles {
  static constexpr int warps = 4;
  static constexpr int threads = 32 * warps;
  // Two row tiles of 16 queries a warp, so that each K and V fragment a warp
  // loads from shared memory serves two products (FlashAttention-2's 128
  // queries a block of four warps).
  static constexpr int row_tiles = 2;
  static constexpr int queries = 16 * row_tiles * warps;  // a block's queries
  // A tile of keys (and values): 32 at head_dim 128, where the output rows
  // take 128 registers and two stages of 64-key K and V tiles beside Q would
  // pass the 99 KiB a block of sm_86 and sm_89 may have (104 KiB; 70 with 32).
  static constexpr int keys = D <= 64 ? KeysUpTo64 : 32;
  // Elements a tile row takes in shared memory: 16 bytes past D, so the eight
  // rows an ldmatrix reads start in different banks.
  static constexpr int ld = D + 8;
  // Q, then two stages of K and V: the next tile's copies fly while this one is used.
  template <class T>
  FUSOR_HOST_DEVICE static constexpr std::size_t shared_bytes() {
    return std::size_t(queries + 2 * 2 * keys) * ld * sizeof(T);
  }
};

// Starts copying rows t0 + [0, Rows) of one head's D columns (from `column`)
// into a tile; rows past `time` and columns past d (a multiple of 8) are
// zeros. The copies land at Simt::wait_async, the others' after a sync_block.
// Thread i copies 16-byte piece i % chunks of rows i / chunks + k (threads /
// chunks), k = 0, 1, ...: a fixed, unrolled count, each piece's source an
// addition from the thread's first (no 64-bit multiplication a piece), and
// pieces outside one zero-filling copy (no branch, no separate store).
template <class Simt, int D, int Rows, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE void load_flash_tile(T* tile, const attention_rows<const T>& qkv, index_t b,
                                                     index_t t0, index_t time, index_t column, int d) {
  constexpr int chunks = D / 8, pieces = Rows * chunks;  // 16-byte pieces of a row, of the tile
  constexpr int threads = flash_tiles<D>::threads, rows_per_pass = threads / chunks;
  static_assert(threads % chunks == 0, "fusor: a thread's pieces keep one column");
  const index_t left = time - t0;  // rows of the tile below `time`: [0, Rows]
  const int rows_inside = left <= 0 ? 0 : left >= Rows ? Rows : int(left);
  const int first_row = Simt::thread() / chunks, col = (Simt::thread() % chunks) * 8;
  const T* const valid = qkv.row(b, 0) + column;  // read from nowhere when outside: any valid address
  const T* from = qkv.row(b, t0) + column + col + first_row * qkv.time_stride;
  const index_t from_step = rows_per_pass * qkv.time_stride;
  T* const to = tile + first_row * flash_tiles<D>::ld + col;
  FUSOR_UNROLL
  for (int k = 0; k < (pieces + threads - 1) / threads; ++k, from += from_step) {
    const int row = first_row + k * rows_per_pass;
    if (pieces % threads != 0 && row >= Rows) break;
    const bool inside = row < rows_inside && col < d;
    Simt::copy_async_16_or_zero(to + k * rows_per_pass * flash_tiles<D>::ld, inside ? from : valid, inside);
  }
}

// acc[m][n][...] += A_m B^T for M row tiles of 16: A_m from `a_rows` + 16 m
// rows (KSteps steps of 16 columns), B's rows from `b_rows` (NTiles tiles of
// 8 rows): the product of a warp's rows with a tile's rows. Each B fragment
// loaded serves the M row tiles.
template <class Simt, class T, int KSteps, int NTiles, int ld, int M>
FUSOR_DEVICE FUSOR_FORCE_INLINE void warp_rows_times_rows(float (&acc)[M][NTiles][4], const T* a_rows,
                                                          const T* b_rows) {
  FUSOR_UNROLL
  for (int kk = 0; kk < KSteps; ++kk) {
    std::uint32_t a[M][4];
    FUSOR_UNROLL
    for (int m = 0; m < M; ++m) Simt::template ldmatrix_x4<false>(a[m], a_rows + m * 16 * ld + kk * 16);
    FUSOR_UNROLL
    for (int nt = 0; nt < NTiles; nt += 2) {
      std::uint32_t b[4];
      Simt::template ldmatrix_x4<false>(b, b_rows + nt * 8 * ld + kk * 16);
      FUSOR_UNROLL
      for (int m = 0; m < M; ++m) {
        Simt::template mma<T>(acc[m][nt], a[m], b[0], b[1]);
        Simt::template mma<T>(acc[m][nt + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// acc[m][dn][...] += P_m B for M row tiles of 16: P_m the fp32 accumulators
// p[m] (16 rows x 16 KSteps columns) rounded to T, B the tile whose rows
// `b_rows` (transposed ldmatrix) are P's columns: P V, P^T dY, dS^T Q, dS K.
template <class Simt, class T, int KSteps, int NTiles, int ld, int M>
FUSOR_DEVICE FUSOR_FORCE_INLINE void warp_registers_times_rows(float (&acc)[M][NTiles][4],
                                                               const float (&p)[M][2 * KSteps][4], const T* b_rows) {
  FUSOR_UNROLL
  for (int ks = 0; ks < KSteps; ++ks) {
    std::uint32_t a[M][4];
    FUSOR_UNROLL
    for (int m = 0; m < M; ++m) {
      a[m][0] = pack_pair<T>(p[m][2 * ks][0], p[m][2 * ks][1]);
      a[m][1] = pack_pair<T>(p[m][2 * ks][2], p[m][2 * ks][3]);
      a[m][2] = pack_pair<T>(p[m][2 * ks + 1][0], p[m][2 * ks + 1][1]);
      a[m][3] = pack_pair<T>(p[m][2 * ks + 1][2], p[m][2 * ks + 1][3]);
    }
    FUSOR_UNROLL
    for (int dn = 0; dn < NTiles; dn += 2) {
      std::uint32_t b[4];
      Simt::template ldmatrix_x4<true>(b, b_rows + ks * 16 * ld + dn * 8);
      FUSOR_UNROLL
      for (int m = 0; m < M; ++m) {
        Simt::template mma<T>(acc[m][dn], a[m], b[0], b[1]);
        Simt::template mma<T>(acc[m][dn + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// Writes a warp's 16 x D accumulator rows to `row(t)` for the lane's rows
// index[0] and index[1] that are below `time` (row r times scale[r]), columns below d.
template <int D, class Out, class Row>
FUSOR_DEVICE FUSOR_FORCE_INLINE void store_warp_rows(const float (&acc)[D / 8][4], const index_t (&index)[2],
                                                     index_t time, int d, int quad, const float (&scale)[2],
                                                     const Row& row) {
  FUSOR_UNROLL
  for (int r = 0; r < 2; ++r) {
    if (index[r] >= time) continue;
    Out* const out = row(index[r]);
    FUSOR_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) {
      const int col = dn * 8 + quad * 2;  // d is a multiple of 8: col + 1 < d too
      if (col < d) {
        out[col] = convert<Out>(acc[dn][2 * r] * scale[r]);
        out[col + 1] = convert<Out>(acc[dn][2 * r + 1] * scale[r]);
      }
    }
  }
}

// The causal mask of a warp's M row tiles of accumulators (16 rows x 8 Tiles
// columns each; this lane's rows at rows[m][0] and rows[m][1], its columns
// first + 8 nt + 2 quad + e): -inf where the pair is not visible. Offsets
// from `first` in int, one compare an element.
//   RowsAreQueries: S = Q K^T, a key (column) after the row's query is hidden;
//   otherwise:      S^T = K Q^T, a query (column) before the row's key is hidden.
template <bool RowsAreQueries, int M, int Tiles>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void mask_causal(float (&acc)[M][Tiles][4], const index_t (&rows)[M][2],
                                                      index_t first, int quad) {
  constexpr float minus_infinity = -::cuda::std::numeric_limits<float>::infinity();
  FUSOR_UNROLL
  for (int m = 0; m < M; ++m)
    FUSOR_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int row = int(rows[m][r] - first) - quad * 2;  // the row's index, from this lane's first column
      FUSOR_UNROLL
      for (int nt = 0; nt < Tiles; ++nt)
        FUSOR_UNROLL
        for (int e = 0; e < 2; ++e)
          if (RowsAreQueries ? nt * 8 + e > row : nt * 8 + e < row) acc[m][nt][2 * r + e] = minus_infinity;
    }
}

// Where this lane points ldmatrix (lane i gives row i % 8 of matrix i / 8),
// as element offsets in a tile of row stride ld: `a`, the four matrices of an
// A fragment of 16 rows (rows +0/+8, columns +0/+8; add the warp's first
// row); `b`, two B fragments of a pair of 8-row tiles (rows +0/+8, columns
// +0/+8), for a product with the tile's rows; `b_columns`, with ldmatrix's
// transpose, two B fragments of a 16-row step (rows +0/+8, columns +0/+8 of
// two 8-column tiles), for a product with the tile's columns.
struct ldmatrix_offsets {
  int a, b, b_columns;
};
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE ldmatrix_offsets ldmatrix_offsets_of(int lane, int ld) {
  const int row8 = lane & 7, bit3 = (lane >> 3) & 1, bit4 = (lane >> 4) & 1;
  return {(row8 + bit3 * 8) * ld + bit4 * 8, (bit4 * 8 + row8) * ld + bit3 * 8, (bit3 * 8 + row8) * ld + bit4 * 8};
}

// Starts copying keys [k0, k0 + Keys) of key/value head kv into stage `into`
// of the K and V tiles (stage s at k_tile + s * stride, v_tile likewise), as one group.
template <class Simt, int D, int Keys, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE void load_key_value_stage(T* k_tile, T* v_tile, int stride, int into,
                                                          const attention_rows<const T>& qkv,
                                                          const attention_geometry& g, index_t b, index_t kv,
                                                          index_t k0) {
  const int d = int(g.head_dim);
  load_flash_tile<Simt, D, Keys>(k_tile + into * stride, qkv, b, k0, g.time, g.key_column(kv), d);
  load_flash_tile<Simt, D, Keys>(v_tile + into * stride, qkv, b, k0, g.time, g.value_column(kv), d);
  Simt::commit_async();
}

// One block of the forward pass: queries [q0, q0 + flash_tiles<D>::queries)
// of head block_x % H of sample block_x / H, q0 from block_y (the longest
// blocks first).
// `shared`: flash_tiles<D, KeysUpTo64>::shared_bytes<T>() bytes, 16-byte aligned.
template <class Simt, int D, int KeysUpTo64 = 64, class Y, class L, class T>
FUSOR_DEVICE void flash_forward_block(const attention_forward<Y, L, T>& f, unsigned char* shared) {
  static_assert(std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>, "fusor: flash attention takes bf16 or fp16");
  static_assert(D % 16 == 0 && D <= 128, "fusor: flash attention pads heads to 16, 32, 64 or 128 columns");
  using tiles = flash_tiles<D, KeysUpTo64>;
  static_assert(tiles::template shared_bytes<T>() <= flash_shared_limit, "fusor: flash forward's tiles must fit sm_86/89");
  constexpr int ld = tiles::ld, K = tiles::keys;
  constexpr float minus_infinity = -::cuda::std::numeric_limits<float>::infinity();
  const attention_geometry& g = f.shape;
  const int thread = Simt::thread(), warp = thread / 32, lane = thread % 32, group = lane / 4, quad = lane % 4;
  const index_t bh = Simt::block_x(), b = bh / g.heads, h = bh % g.heads, kv = h / g.group();
  const index_t q0 = (Simt::grid_y() - 1 - Simt::block_y()) * tiles::queries;
  const int d = int(g.head_dim);

  // Q, then stages of K and V (stage s at k_tile + s * stage).
  constexpr int stage = 2 * K * ld;
  T* const q_tile = reinterpret_cast<T*>(shared);
  T* const k_tile = q_tile + tiles::queries * ld;
  T* const v_tile = k_tile + K * ld;
  auto load_keys = [&](index_t k0, int into) {
    load_key_value_stage<Simt, D, K>(k_tile, v_tile, stage, into, f.qkv, g, b, kv, k0);
  };
  load_flash_tile<Simt, D, tiles::queries>(q_tile, f.qkv, b, q0, g.time, g.query_column(h), d);
  load_keys(0, 0);

  // S = Q K^T from Q's rows and K's; O += P V from V's columns.
  constexpr int M = tiles::row_tiles;
  const ldmatrix_offsets at = ldmatrix_offsets_of(lane, ld);
  const T* const q_rows = q_tile + warp * 16 * M * ld + at.a;
  const T* const k_rows = k_tile + at.b;
  const T* const v_columns = v_tile + at.b_columns;

  // This lane's rows of the warp's 16 M queries: group and group + 8 of each
  // row tile m ([m][0], [m][1]).
  const index_t first_query = q0 + warp * 16 * M;
  index_t query[M][2];
  float o[M][D / 8][4], row_max[M][2], row_sum[M][2];
  FUSOR_UNROLL
  for (int m = 0; m < M; ++m) {
    query[m][0] = first_query + 16 * m + group;
    query[m][1] = first_query + 16 * m + group + 8;
    row_max[m][0] = row_max[m][1] = minus_infinity;
    row_sum[m][0] = row_sum[m][1] = 0.0f;
    FUSOR_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) o[m][dn][0] = o[m][dn][1] = o[m][dn][2] = o[m][dn][3] = 0.0f;
  }
  const float scale = 1.4426950408889634f / ::cuda::std::sqrt(float(d));  // 1 / sqrt(d) in log2 units

  const index_t block_end = q0 + tiles::queries < g.time ? q0 + tiles::queries : g.time;
  for (index_t k0 = 0, j = 0; k0 < block_end; k0 += K, ++j) {
    const int current = int(j & 1);
    Simt::wait_async();  // this thread's copies of this tile (and of Q)
    Simt::sync_block();  // everyone's; and the other stage's tile is used up
    if (k0 + K < block_end) load_keys(k0 + K, current ^ 1);
    // Every key of the tile after every query of the warp: nothing to add.
    if (k0 >= first_query + 16 * M) continue;

    // S = Q K^T: M row tiles of 16 x K, K / 8 accumulators of 8 keys each.
    float s[M][K / 8][4];
    FUSOR_UNROLL
    for (int m = 0; m < M; ++m)
      FUSOR_UNROLL
      for (int nt = 0; nt < K / 8; ++nt) s[m][nt][0] = s[m][nt][1] = s[m][nt][2] = s[m][nt][3] = 0.0f;
    warp_rows_times_rows<Simt, T, D / 16, K / 8, ld, M>(s, q_rows, k_rows + current * stage);

    // The causal mask, on the diagonal's tiles only (some key after some query).
    if (k0 + K - 1 > first_query) mask_causal<true>(s, query, k0, quad);

    // The online softmax of each row (its K columns over the lane's quad), in
    // log2 units: the maximum of the raw scores, then exp2(x scale - max), one FFMA.
    FUSOR_UNROLL
    for (int m = 0; m < M; ++m)
      FUSOR_UNROLL
      for (int r = 0; r < 2; ++r) {
        float x_max = minus_infinity;
        FUSOR_UNROLL
        for (int nt = 0; nt < K / 8; ++nt)
          FUSOR_UNROLL
          for (int e = 0; e < 2; ++e) x_max = ::cuda::std::fmax(x_max, s[m][nt][2 * r + e]);
        x_max = ::cuda::std::fmax(x_max, Simt::shfl_xor(x_max, 1));
        x_max = ::cuda::std::fmax(x_max, Simt::shfl_xor(x_max, 2));
        // Each row has seen a key at or before it (key 0 on the first tile),
        // so its running maximum is finite; a row all of whose keys in this
        // tile are masked keeps it and adds zeros.
        const float new_max = ::cuda::std::fmax(row_max[m][r], x_max * scale);
        const bool grew = new_max != row_max[m][r];
        const float correction = Simt::exp2(row_max[m][r] - new_max);  // 0 on the first tile (from -inf)
        row_max[m][r] = new_max;
        float sum = 0.0f;
        FUSOR_UNROLL
        for (int nt = 0; nt < K / 8; ++nt)
          FUSOR_UNROLL
          for (int e = 0; e < 2; ++e) {
            float& x = s[m][nt][2 * r + e];
            x = Simt::exp2(x * scale - new_max);
            sum += x;
          }
        row_sum[m][r] = row_sum[m][r] * correction + sum;  // the quad's share; summed at the end
        // The output row rescaled only where the maximum grew (correction 1
        // otherwise): a warp none of whose rows grew skips it, as most do
        // once a row has seen many keys.
        if (grew) {
          FUSOR_UNROLL
          for (int dn = 0; dn < D / 8; ++dn) {
            o[m][dn][2 * r] *= correction;
            o[m][dn][2 * r + 1] *= correction;
          }
        }
      }

    // O += P V: P's accumulators of two 8-key tiles are the A fragment of a 16-key step.
    warp_registers_times_rows<Simt, T, K / 16, D / 8, ld, M>(o, s, v_columns + current * stage);
  }

  FUSOR_UNROLL
  for (int m = 0; m < M; ++m) {
    float inverse[2];
    FUSOR_UNROLL
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[m][r];
      sum += Simt::shfl_xor(sum, 1);
      sum += Simt::shfl_xor(sum, 2);
      inverse[r] = 1.0f / sum;
      if (quad == 0 && query[m][r] < g.time)
        f.lse.at(b, h, query[m][r]) = convert<L>(row_max[m][r] * 0.6931471805599453f + ::cuda::std::log(sum));
    }
    store_warp_rows<D, Y>(o[m], query[m], g.time, d, quad, inverse,
                          [&](index_t t) { return f.y.row(b, t) + g.query_column(h); });
  }
}

// Whether the flash kernels take heads of this size (a multiple of 8 columns,
// up to 128), and rows read as 16-byte pieces: 16-byte aligned, every row and
// head 16 bytes apart (strides a multiple of 8 16-bit elements).
inline bool flash_heads_take(const attention_geometry& g) { return g.head_dim % 8 == 0 && g.head_dim <= 128; }
template <class T>
bool flash_rows_take(const attention_rows<T>& rows) {
  return reinterpret_cast<std::uintptr_t>(rows.data) % 16 == 0 && rows.batch_stride % 8 == 0 &&
         rows.time_stride % 8 == 0;
}

// Whether flash_forward_block takes these operands (the types aside): heads
// of at most 128 columns, a multiple of 8, and every head's rows 16-byte
// aligned in qkv.
template <class Y, class L, class T>
bool flash_forward_takes(const attention_forward<Y, L, T>& f) {
  return sizeof(T) == 2 && flash_heads_take(f.shape) && flash_rows_take(f.qkv);
}

#if FUSOR_HAS_CUDA
template <int D, int KeysUpTo64, class Y, class L, class T>
__global__ void __launch_bounds__(flash_tiles<D>::threads, 2)
    attention_flash_forward_kernel(const attention_forward<Y, L, T> f) {
  extern __shared__ __align__(128) unsigned char flash_shared[];
  flash_forward_block<device_simt, D, KeysUpTo64>(f, flash_shared);
}

// Whether Kernel's code for the current device is sm_80 or newer (mma.sync
// of bf16 and ldmatrix), not JIT-compiled from older PTX: asked once per device.
template <auto Kernel>
bool runs_tensor_core_mma() {
  static per_device_cache<bool> known;
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  return known.get(device, [] { return gpu::code_version_at_least(Kernel, 80); });
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
