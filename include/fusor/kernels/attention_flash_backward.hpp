// fusor/kernels/attention_flash_backward.hpp — causal attention's backward
// pass with its tiles in registers, for bf16 and fp16 data on sm_80 and
// later; the forward's companion (attention_flash.hpp), written against the
// same Simt policy, so the host tests run it too (simt_emulator.hpp).
//
// Deterministic, without atomics, as the kernels it replaces: one block per
// 128 keys (64 at head_dim 128) of a key/value head forms dK and dV, summed
// over the group's query heads and every query tile from the diagonal on; one
// block per 128 (64) queries of a head forms dQ over the key tiles up to the
// diagonal. Both recompute P = exp(S - lse) from the forward's log-sum-exp
// and take delta = rowsum(dY * Y) (attention_delta_kernel,
// attention_cuda.hpp). Per row tile of 16, with mma.m16n8k16 from ldmatrix'd
// tiles:
//   keys:    S^T = K Q^T, dP^T = V dY^T, dS^T = P^T (dP^T - delta);
//            dV += P^T dY, dK += dS^T Q (P^T and dS^T rounded to the data
//            type, going from accumulator to operand registers)
//   queries: S = Q K^T, dP = dY V^T, dS = P (dP - delta); dQ += dS K
// dK and dQ are scaled by 1/sqrt(head_dim) once, at the end. The tiles a
// block walks are copied with cp.async in two stages (the next one's copies
// in flight while this one is used). Each warp holds two row tiles of 16
// keys (queries) up to head_dim 64, so that each fragment of a walked tile it
// loads serves two products, and one at 128 (dK and dV of one tile already
// take 128 registers); the tiles walked are 32 rows.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/config.hpp"
#include "fusor/kernels/attention_flash.hpp"
#include "fusor/kernels/attention_operands.hpp"
#include "fusor/kernels/warp_mma.hpp"

namespace fusor::detail {

// Shapes of the backward's blocks for head_dim padded to D.
template <int D>
struct flash_backward_tiles {
  static constexpr int warps = 4;
  static constexpr int threads = 32 * warps;
  static constexpr int row_tiles = D <= 64 ? 2 : 1;    // of 16 rows, a warp
  static constexpr int rows = 16 * row_tiles * warps;  // a block's keys (dK, dV) or queries (dQ)
  static constexpr int queries = 32;                   // a key block's tile of queries
  static constexpr int keys = 32;                      // a query block's tile of keys
  static constexpr int ld = flash_tiles<D>::ld;
  // The tiles walked come in two stages (the next one's copies fly while this
  // one is used). A key block's stage: Q, dY, then lse and delta of the tile.
  template <class T>
  FUSOR_HOST_DEVICE static constexpr int key_stage_bytes() {
    return 2 * queries * ld * int(sizeof(T)) + 2 * queries * int(sizeof(float));
  }
  template <class T>
  FUSOR_HOST_DEVICE static constexpr std::size_t key_shared_bytes() {  // K, V; two stages
    return std::size_t(2 * rows * ld) * sizeof(T) + 2 * std::size_t(key_stage_bytes<T>());
  }
  template <class T>
  FUSOR_HOST_DEVICE static constexpr std::size_t query_shared_bytes() {  // Q, dY; two stages of K and V
    return std::size_t(2 * rows + 2 * 2 * keys) * ld * sizeof(T);
  }
};

// Query t of head h's log-sum-exp in log2 units and its delta, or +inf and 0
// past the end (so that P = exp2(S - lse) is 0 there): both kernels' view of
// the forward's statistics.
struct flash_query_statistics {
  float lse_log2, delta;
};
template <class DQKV, class QKV, class Y, class L>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE flash_query_statistics flash_query_statistics_of(
    const attention_backward<DQKV, QKV, QKV, Y, L>& w, const float* delta, index_t b, index_t h, index_t t) {
  const attention_geometry& g = w.shape;
  if (t >= g.time) return {::cuda::std::numeric_limits<float>::infinity(), 0.0f};
  return {convert<float>(w.lse.at(b, h, t)) * 1.4426950408889634f, delta[(b * g.heads + h) * g.time + t]};
}

// dK and dV of keys [R block_y, + R) of key/value head block_x % G of sample
// block_x / G, R = flash_backward_tiles<D>::rows. `shared`:
// key_shared_bytes<T>() bytes, 16-byte aligned.
template <class Simt, int D, class DQKV, class QKV, class Y, class L>
FUSOR_DEVICE void flash_key_gradient_block(const attention_backward<DQKV, QKV, QKV, Y, L>& w, const float* delta,
                                           unsigned char* shared) {
  using T = QKV;
  using tiles = flash_backward_tiles<D>;
  static_assert(tiles::template key_shared_bytes<T>() <= flash_shared_limit,
                "fusor: flash backward's dK/dV tiles must fit sm_86/89");
  constexpr int ld = tiles::ld, N = tiles::queries, M = tiles::row_tiles;
  constexpr float log2e = 1.4426950408889634f;
  const attention_geometry& g = w.shape;
  const int thread = Simt::thread(), warp = thread / 32, lane = thread % 32, group = lane / 4, quad = lane % 4;
  const index_t bg = Simt::block_x(), b = bg / g.kv_heads, kv = bg % g.kv_heads;
  const index_t k0 = Simt::block_y() * tiles::rows;
  const int d = int(g.head_dim);

  // K, V; then two stages of Q, dY, lse (log2 units, +inf past the end: P = 0) and delta.
  T* const k_tile = reinterpret_cast<T*>(shared);
  T* const v_tile = k_tile + tiles::rows * ld;
  unsigned char* const stages = reinterpret_cast<unsigned char*>(v_tile + tiles::rows * ld);
  constexpr int stage_bytes = tiles::template key_stage_bytes<T>();
  auto q_tile = [&](int stage) { return reinterpret_cast<T*>(stages + stage * stage_bytes); };
  auto dy_tile = [&](int stage) { return q_tile(stage) + N * ld; };
  auto lse_tile = [&](int stage) { return reinterpret_cast<float*>(dy_tile(stage) + N * ld); };
  auto delta_tile = [&](int stage) { return lse_tile(stage) + N; };
  // The walk: each query head of key/value head kv (kv G to kv G + G - 1),
  // its query tiles from the diagonal's (start) to the last, one a step;
  // positions advance by addition (a division a step cost ~40 instructions).
  struct walk_position {
    index_t head, first_query;
  };
  const index_t start = k0 / N * N, per_head = (g.time - start + N - 1) / N, steps = g.group() * per_head;
  auto advance = [&](walk_position p) {
    p.first_query += N;
    if (p.first_query >= g.time) p.first_query = start, ++p.head;
    return p;
  };
  // A step's Q and dY tiles are copied asynchronously; thread c < N reads
  // query c's statistics into registers (read_statistics) during the step
  // before and stores them into the stage at that step's end
  // (store_statistics), so their global loads' latency hides behind that
  // step's products instead of stalling the first warp.
  static_assert(N <= tiles::threads, "fusor: a thread per query of the tile reads its statistics");
  auto load_tiles = [&](walk_position p, int stage) {
    load_flash_tile<Simt, D, N>(q_tile(stage), w.qkv, b, p.first_query, g.time, g.query_column(p.head), d);
    load_flash_tile<Simt, D, N>(dy_tile(stage), w.dy, b, p.first_query, g.time, g.query_column(p.head), d);
    Simt::commit_async();
  };
  auto read_statistics = [&](walk_position p) {
    return thread < N ? flash_query_statistics_of(w, delta, b, p.head, p.first_query + thread)
                      : flash_query_statistics{};
  };
  auto store_statistics = [&](int stage, const flash_query_statistics& q) {
    if (thread < N) {
      Simt::store_shared(lse_tile(stage) + thread, q.lse_log2);
      Simt::store_shared(delta_tile(stage) + thread, q.delta);
    }
  };
  load_flash_tile<Simt, D, tiles::rows>(k_tile, w.qkv, b, k0, g.time, g.key_column(kv), d);
  load_flash_tile<Simt, D, tiles::rows>(v_tile, w.qkv, b, k0, g.time, g.value_column(kv), d);
  walk_position here{kv * g.group(), start};
  load_tiles(here, 0);
  store_statistics(0, read_statistics(here));

  // S^T = K Q^T and dP^T = V dY^T from the warp's key rows and the tile's
  // rows; dV += P^T dY and dK += dS^T Q from the tile's columns.
  const ldmatrix_offsets at = ldmatrix_offsets_of(lane, ld);
  const T* const k_rows = k_tile + warp * 16 * M * ld + at.a;
  const T* const v_rows = v_tile + warp * 16 * M * ld + at.a;

  // This lane's keys: group and group + 8 of each of the warp's row tiles.
  const index_t first_key = k0 + warp * 16 * M;
  index_t key[M][2];
  float dk[M][D / 8][4], dv[M][D / 8][4];
  FUSOR_UNROLL
  for (int m = 0; m < M; ++m) {
    key[m][0] = first_key + 16 * m + group;
    key[m][1] = first_key + 16 * m + group + 8;
    FUSOR_UNROLL
    for (int dn = 0; dn < D / 8; ++dn)
      FUSOR_UNROLL
      for (int i = 0; i < 4; ++i) dk[m][dn][i] = dv[m][dn][i] = 0.0f;
  }
  const float scale_log2 = log2e / ::cuda::std::sqrt(float(d));

  for (index_t step = 0; step < steps; ++step) {
    const int current = int(step & 1);
    Simt::wait_async();  // this thread's copies of this step's tiles (and of K, V)
    Simt::sync_block();  // everyone's; and the other stage is used up
    const bool more = step + 1 < steps;
    flash_query_statistics next_statistics{};
    if (more) {
      const walk_position next = advance(here);
      load_tiles(next, current ^ 1);
      next_statistics = read_statistics(next);
    }
    const index_t t0 = here.first_query;
    // t0 and first_key are multiples of 16: a tile either ends before the
    // warp's first key (nothing visible) or its queries reach them.
    if (t0 + N > first_key) {
      const T* const q = q_tile(current);
      const T* const dy = dy_tile(current);
      const float* const lse_of = lse_tile(current);
      const float* const delta_of = delta_tile(current);

      float st[M][N / 8][4], dst[M][N / 8][4];  // S^T, then P^T; dP^T, then dS^T
      FUSOR_UNROLL
      for (int m = 0; m < M; ++m)
        FUSOR_UNROLL
        for (int nt = 0; nt < N / 8; ++nt)
          FUSOR_UNROLL
          for (int i = 0; i < 4; ++i) st[m][nt][i] = dst[m][nt][i] = 0.0f;
      warp_rows_times_rows<Simt, T, D / 16, N / 8, ld, M>(st, k_rows, q + at.b);
      warp_rows_times_rows<Simt, T, D / 16, N / 8, ld, M>(dst, v_rows, dy + at.b);

      // The causal mask, on the diagonal's tiles only (some query before some key): P = 0 there.
      if (t0 < first_key + 16 * M) mask_causal<false>(st, key, t0, quad);
      FUSOR_UNROLL
      for (int nt = 0; nt < N / 8; ++nt)
        FUSOR_UNROLL
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + quad * 2 + e;  // the query's column in the tile
          const float lse_c = Simt::load_shared(lse_of + c), delta_c = Simt::load_shared(delta_of + c);
          FUSOR_UNROLL
          for (int m = 0; m < M; ++m)
            FUSOR_UNROLL
            for (int r = 0; r < 2; ++r) {
              const int i = 2 * r + e;
              const float p = Simt::exp2(st[m][nt][i] * scale_log2 - lse_c);  // lse +inf past the end: 0
              st[m][nt][i] = p;
              dst[m][nt][i] = p * (dst[m][nt][i] - delta_c);
            }
        }
      warp_registers_times_rows<Simt, T, N / 16, D / 8, ld, M>(dv, st, dy + at.b_columns);
      warp_registers_times_rows<Simt, T, N / 16, D / 8, ld, M>(dk, dst, q + at.b_columns);
    }
    if (more) store_statistics(current ^ 1, next_statistics);
    here = advance(here);  // recomputed: one position less live through the step's products
  }
  const float scale = 1.0f / ::cuda::std::sqrt(float(d)), scales[2] = {scale, scale}, ones[2] = {1.0f, 1.0f};
  FUSOR_UNROLL
  for (int m = 0; m < M; ++m) {
    store_warp_rows<D, DQKV>(dk[m], key[m], g.time, d, quad, scales,
                             [&](index_t t) { return w.dqkv.row(b, t) + g.key_column(kv); });
    store_warp_rows<D, DQKV>(dv[m], key[m], g.time, d, quad, ones,
                             [&](index_t t) { return w.dqkv.row(b, t) + g.value_column(kv); });
  }
}

// dQ of queries [q0, q0 + R) of head block_x % H of sample block_x / H, q0
// from block_y (the longest blocks first), R = flash_backward_tiles<D>::rows.
// `shared`: query_shared_bytes<T>().
template <class Simt, int D, class DQKV, class QKV, class Y, class L>
FUSOR_DEVICE void flash_query_gradient_block(const attention_backward<DQKV, QKV, QKV, Y, L>& w, const float* delta,
                                             unsigned char* shared) {
  using T = QKV;
  using tiles = flash_backward_tiles<D>;
  static_assert(tiles::template query_shared_bytes<T>() <= flash_shared_limit,
                "fusor: flash backward's dQ tiles must fit sm_86/89");
  constexpr int ld = tiles::ld, K = tiles::keys, M = tiles::row_tiles;
  constexpr float log2e = 1.4426950408889634f;
  const attention_geometry& g = w.shape;
  const int thread = Simt::thread(), warp = thread / 32, lane = thread % 32, group = lane / 4, quad = lane % 4;
  const index_t bh = Simt::block_x(), b = bh / g.heads, h = bh % g.heads, kv = h / g.group();
  const index_t q0 = (Simt::grid_y() - 1 - Simt::block_y()) * tiles::rows;
  const int d = int(g.head_dim);

  // Q, dY; then two stages of K and V (stage s at k_tile + s * stage).
  constexpr int stage = 2 * K * ld;
  T* const q_tile = reinterpret_cast<T*>(shared);
  T* const dy_tile = q_tile + tiles::rows * ld;
  T* const k_tile = dy_tile + tiles::rows * ld;
  T* const v_tile = k_tile + K * ld;
  auto load_keys = [&](index_t k0, int into) {
    load_key_value_stage<Simt, D, K>(k_tile, v_tile, stage, into, w.qkv, g, b, kv, k0);
  };
  load_flash_tile<Simt, D, tiles::rows>(q_tile, w.qkv, b, q0, g.time, g.query_column(h), d);
  load_flash_tile<Simt, D, tiles::rows>(dy_tile, w.dy, b, q0, g.time, g.query_column(h), d);
  load_keys(0, 0);

  // S = Q K^T and dP = dY V^T from the warp's rows and the tile's; dQ += dS K from K's columns.
  const ldmatrix_offsets at = ldmatrix_offsets_of(lane, ld);
  const T* const q_rows = q_tile + warp * 16 * M * ld + at.a;
  const T* const dy_rows = dy_tile + warp * 16 * M * ld + at.a;
  const T* const k_rows = k_tile + at.b;
  const T* const v_rows = v_tile + at.b;
  const T* const k_columns = k_tile + at.b_columns;

  // This lane's queries: group and group + 8 of each of the warp's row tiles.
  const index_t first_query = q0 + warp * 16 * M;
  index_t query[M][2];
  float lse[M][2], row_delta[M][2];  // lse in log2 units; +inf past the end (P = 0)
  float dq[M][D / 8][4];
  FUSOR_UNROLL
  for (int m = 0; m < M; ++m) {
    FUSOR_UNROLL
    for (int r = 0; r < 2; ++r) {
      query[m][r] = first_query + 16 * m + group + 8 * r;
      const flash_query_statistics q = flash_query_statistics_of(w, delta, b, h, query[m][r]);
      lse[m][r] = q.lse_log2;
      row_delta[m][r] = q.delta;
    }
    FUSOR_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) dq[m][dn][0] = dq[m][dn][1] = dq[m][dn][2] = dq[m][dn][3] = 0.0f;
  }
  const float scale_log2 = log2e / ::cuda::std::sqrt(float(d));

  const index_t block_end = q0 + tiles::rows < g.time ? q0 + tiles::rows : g.time;
  for (index_t k0 = 0, j = 0; k0 < block_end; k0 += K, ++j) {
    const int current = int(j & 1);
    Simt::wait_async();  // this thread's copies of this tile (and of Q, dY)
    Simt::sync_block();  // everyone's; and the other stage's tile is used up
    if (k0 + K < block_end) load_keys(k0 + K, current ^ 1);
    if (k0 >= first_query + 16 * M) continue;  // every key after every query of the warp

    float s[M][K / 8][4], ds[M][K / 8][4];  // S, then P; dP, then dS
    FUSOR_UNROLL
    for (int m = 0; m < M; ++m)
      FUSOR_UNROLL
      for (int nt = 0; nt < K / 8; ++nt)
        FUSOR_UNROLL
        for (int i = 0; i < 4; ++i) s[m][nt][i] = ds[m][nt][i] = 0.0f;
    warp_rows_times_rows<Simt, T, D / 16, K / 8, ld, M>(s, q_rows, k_rows + current * stage);
    warp_rows_times_rows<Simt, T, D / 16, K / 8, ld, M>(ds, dy_rows, v_rows + current * stage);

    // The causal mask, on the diagonal's tiles only (some key after some query): P = 0 there.
    if (k0 + K - 1 > first_query) mask_causal<true>(s, query, k0, quad);
    FUSOR_UNROLL
    for (int m = 0; m < M; ++m)
      FUSOR_UNROLL
      for (int nt = 0; nt < K / 8; ++nt)
        FUSOR_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int r = i >> 1;
          const float p = Simt::exp2(s[m][nt][i] * scale_log2 - lse[m][r]);  // lse +inf past the end: 0
          ds[m][nt][i] = p * (ds[m][nt][i] - row_delta[m][r]);
        }
    warp_registers_times_rows<Simt, T, K / 16, D / 8, ld, M>(dq, ds, k_columns + current * stage);
  }
  const float scale = 1.0f / ::cuda::std::sqrt(float(d)), scales[2] = {scale, scale};
  FUSOR_UNROLL
  for (int m = 0; m < M; ++m)
    store_warp_rows<D, DQKV>(dq[m], query[m], g.time, d, quad, scales,
                             [&](index_t t) { return w.dqkv.row(b, t) + g.query_column(h); });
}

// Whether the flash backward takes these operands (the types aside): as the
// forward, and dy's rows 16-byte aligned too.
template <class DQKV, class DY, class QKV, class Y, class L>
bool flash_backward_takes(const attention_backward<DQKV, DY, QKV, Y, L>& w) {
  return sizeof(QKV) == 2 && std::is_same_v<std::remove_const_t<DY>, std::remove_const_t<QKV>> &&
         flash_heads_take(w.shape) && flash_rows_take(w.qkv) && flash_rows_take(w.dy);
}

#if FUSOR_HAS_CUDA
template <int D, class DQKV, class QKV, class Y, class L>
__global__ void __launch_bounds__(flash_backward_tiles<D>::threads, 2)
    attention_flash_key_gradient_kernel(const attention_backward<DQKV, QKV, QKV, Y, L> w, const float* delta) {
  extern __shared__ __align__(128) unsigned char flash_shared[];
  flash_key_gradient_block<device_simt, D>(w, delta, flash_shared);
}
template <int D, class DQKV, class QKV, class Y, class L>
__global__ void __launch_bounds__(flash_backward_tiles<D>::threads, 2)
    attention_flash_query_gradient_kernel(const attention_backward<DQKV, QKV, QKV, Y, L> w, const float* delta) {
  extern __shared__ __align__(128) unsigned char flash_shared[];
  flash_query_gradient_block<device_simt, D>(w, delta, flash_shared);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
