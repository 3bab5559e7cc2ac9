// fusor/kernels/attention_host.hpp — causal attention (attention.hpp) on the
// host, forward and backward.
//
// Blocked as FlashAttention-2 is: queries and keys in blocks of 64 rows, an
// online softmax over the key blocks up to the diagonal (running maximum and
// sum), the T x T matrix never formed. Block products run on fp32 (fp64 for
// fp64 data) copies of the blocks (attention_host_blocks.hpp); on a diagonal
// block they skip the tiles the causal mask zeroes.
//
// Forward: the keys of each (sample, key/value head) are transposed and the
// values converted once per call; then one task per (batch, head, query
// block), spread over OpenMP threads with the longest (last) query blocks
// first; scratch is a few 64 x 64 blocks per thread. Backward: one task per
// (batch, key/value head), which converts its keys and values once, owns
// their gradients (T x head_dim each in fp32, summed over the group's query
// heads) and writes each query block's gradient once: no two threads write
// the same element and every sum runs in a fixed order, so the result does
// not depend on the thread count. The backward works in the transposed
// orientation (keys as rows), where P^T and dS^T feed dV and dK directly and
// dS is transposed once for dQ.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "fusor/config.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/attention_host_blocks.hpp"
#include "fusor/kernels/attention_operands.hpp"

#if FUSOR_HAS_OPENMP
#include <omp.h>
#endif

namespace fusor::detail {
inline namespace FUSOR_HOST_VECTOR_NAMESPACE {  // attention_host_blocks.hpp says why

// ---- forward -----------------------------------------------------------------------------------
// The keys of every (sample, kv head) transposed (padded_d x padded_time) and
// the values (padded_time x padded_d), in S, made once per call: each key
// block serves every query block after it.
template <class S>
struct attention_host_keys {
  S* keys_transposed;
  S* values;
  index_t padded_time, padded_d;
  S* keys_of(index_t b, index_t g, index_t kv_heads) const {
    return keys_transposed + (b * kv_heads + g) * padded_d * padded_time;
  }
  S* values_of(index_t b, index_t g, index_t kv_heads) const {
    return values + (b * kv_heads + g) * padded_time * padded_d;
  }
};

// One query block of one head: the online softmax over key blocks 0..i.
template <class S, class Y, class L, class QKV>
void attention_forward_block(const attention_forward<Y, L, QKV>& f, const attention_host_keys<S>& keys, index_t b,
                             index_t h, index_t i, S* scratch) {
  constexpr index_t B = attention_host_block;
  const attention_geometry& g = f.shape;
  const index_t d = g.head_dim, dp = keys.padded_d, tp = keys.padded_time;
  S* q = scratch;     // B x dp, scaled by 1/sqrt(d)
  S* s = q + B * dp;  // B x B: scores, then probabilities
  S* o = s + B * B;   // B x dp: the unnormalised output
  S* m = o + B * dp;  // B: running maximum
  S* l = m + B;       // B: running sum
  const index_t t0 = i * B, rows = std::min(B, g.time - t0), tile_rows = round_up(rows, host_tile_rows);
  const index_t kv = h / g.group();
  const S* kt = keys.keys_of(b, kv, g.kv_heads);
  const S* v = keys.values_of(b, kv, g.kv_heads);

  load_attention_block<false>(q, dp, f.qkv, b, t0, rows, g.query_column(h), d, dp, S(1) / std::sqrt(S(d)));
  std::fill(o, o + B * dp, S(0));
  std::fill(m, m + B, -std::numeric_limits<S>::infinity());
  std::fill(l, l + B, S(0));
  for (index_t j = 0; j <= i; ++j) {
    if (j == i)
      host_tile_product<false, tile_triangle::columns_to_row>(s, B, q, dp, kt + j * B, tp, tile_rows, B, d);
    else
      host_tile_product<false>(s, B, q, dp, kt + j * B, tp, tile_rows, B, d);  // S = Q K^T
    for (index_t r = 0; r < tile_rows; ++r) {
      S* sr = s + r * B;
      // Keys after the query (and past the end) lie in the diagonal block only.
      if (j == i) std::fill(sr + r + 1, sr + B, -std::numeric_limits<S>::infinity());
      const S new_max = std::max(m[r], attention_row_max(sr, B));  // finite: key 0 is in every first block
      const S sum = attention_exp_row(sr, B, new_max);
      const S correction = host_exp(m[r] - new_max);
      l[r] = l[r] * correction + sum;
      m[r] = new_max;
      if (correction != S(1)) attention_scale_row(o + r * dp, dp, correction);
    }
    const S* vj = v + j * B * dp;  // O += P V
    if (j == i)
      host_tile_product<true, tile_triangle::inner_to_row>(o, dp, s, B, vj, dp, tile_rows, dp, rows);
    else
      host_tile_product<true>(o, dp, s, B, vj, dp, tile_rows, dp, B);
  }
  for (index_t r = 0; r < rows; ++r) {
    Y* out = f.y.row(b, t0 + r) + g.query_column(h);
    const S inverse = S(1) / l[r];
    const S* orow = o + r * dp;
    FUSOR_OMP_SIMD()
    for (index_t x = 0; x < d; ++x) out[x] = convert<Y>(orow[x] * inverse);
    f.lse.at(b, h, t0 + r) = convert<L>(m[r] + std::log(l[r]));
  }
}

template <class Y, class L, class QKV>
void attention_forward_host(const attention_forward<Y, L, QKV>& f, const host_executor& ex) {
  using S = attention_compute_t<QKV>;
  constexpr index_t B = attention_host_block;
  const attention_geometry& g = f.shape;
  if (g.batch == 0 || g.time == 0) return;
  const index_t blocks = (g.time + B - 1) / B, heads = g.batch * g.heads, tasks = heads * blocks;
  const index_t dp = round_up(g.head_dim, host_tile_columns<S>), tp = blocks * B;
  const index_t key_tasks = g.batch * g.kv_heads * blocks;
  host_scratch<S> keys_transposed(key_tasks * B * dp), values(key_tasks * B * dp);
  const attention_host_keys<S> keys{keys_transposed.data(), values.data(), tp, dp};
  const int team = attention_team(ex, heads * g.time * g.time / 2 * g.head_dim, tasks);
#if FUSOR_HAS_OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
#endif
  {
#if FUSOR_HAS_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t task = 0; task < key_tasks; ++task) {
      const index_t j = task % blocks, bg = task / blocks, b = bg / g.kv_heads, kv = bg % g.kv_heads;
      const index_t keys_in_block = std::min(B, g.time - j * B);
      load_attention_block<true>(keys.keys_of(b, kv, g.kv_heads) + j * B, tp, f.qkv, b, j * B, keys_in_block,
                                 g.key_column(kv), g.head_dim, dp, S(1));
      load_attention_block<false>(keys.values_of(b, kv, g.kv_heads) + j * B * dp, dp, f.qkv, b, j * B, keys_in_block,
                                  g.value_column(kv), g.head_dim, dp, S(1));
    }
    host_scratch<S> scratch(3 * B * dp + B * B + 2 * B);
    // The last query blocks (the most key blocks) first, so the team ends together.
#if FUSOR_HAS_OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (index_t task = 0; task < tasks; ++task) {
      const index_t i = blocks - 1 - task / heads, bh = task % heads;
      attention_forward_block(f, keys, bh / g.heads, bh % g.heads, i, scratch.data());
    }
  }
  (void)team;
}

// ---- backward ----------------------------------------------------------------------------------
// Every query head of key/value head `kv` in sample b: dQ of each query block,
// and dK, dV of the group summed into dk, dv. keys, values, dk and dv are
// each the sequence's blocks of 64 rows of dp columns.
template <class S, class DQKV, class DY, class QKV, class Y, class L>
void attention_backward_group(const attention_backward<DQKV, DY, QKV, Y, L>& w, index_t b, index_t kv, S* keys,
                              S* values, S* dk, S* dv, S* scratch) {
  constexpr index_t B = attention_host_block;
  const attention_geometry& g = w.shape;
  const index_t d = g.head_dim, dp = round_up(d, host_tile_columns<S>), blocks = (g.time + B - 1) / B;
  S* q = scratch;        // B x dp, scaled
  S* qt = q + B * dp;    // dp x B, scaled
  S* dy = qt + dp * B;   // B x dp
  S* dyt = dy + B * dp;  // dp x B
  S* dq = dyt + dp * B;  // B x dp
  S* pt = dq + B * dp;   // B x B: P^T (keys as rows)
  S* dst = pt + B * B;   // B x B: dP^T, then dS^T
  S* ds = dst + B * B;   // B x B: dS
  S* lse = ds + B * B;   // B
  S* delta = lse + B;    // B: rowsum(dY * Y)
  const S scale = S(1) / std::sqrt(S(d));
  std::fill(dk, dk + blocks * B * dp, S(0));
  std::fill(dv, dv + blocks * B * dp, S(0));
  for (index_t j = 0; j < blocks; ++j) {
    const index_t keys_in_block = std::min(B, g.time - j * B);
    load_attention_block<false>(keys + j * B * dp, dp, w.qkv, b, j * B, keys_in_block, g.key_column(kv), d, dp, S(1));
    load_attention_block<false>(values + j * B * dp, dp, w.qkv, b, j * B, keys_in_block, g.value_column(kv), d, dp,
                                S(1));
  }

  for (index_t h = kv * g.group(); h < (kv + 1) * g.group(); ++h) {
    for (index_t i = 0; i < blocks; ++i) {
      const index_t t0 = i * B, rows = std::min(B, g.time - t0);
      load_attention_block<false>(q, dp, w.qkv, b, t0, rows, g.query_column(h), d, dp, scale);
      load_attention_block<true>(qt, B, w.qkv, b, t0, rows, g.query_column(h), d, dp, scale);
      load_attention_block<false>(dy, dp, w.dy, b, t0, rows, g.query_column(h), d, dp, S(1));
      load_attention_block<true>(dyt, B, w.dy, b, t0, rows, g.query_column(h), d, dp, S(1));
      for (index_t r = 0; r < B; ++r) {
        if (r >= rows) {  // a padded query: P = 0
          lse[r] = std::numeric_limits<S>::infinity();
          delta[r] = 0;
          continue;
        }
        const Y* yr = w.y.row(b, t0 + r) + g.query_column(h);
        const S* gr = dy + r * dp;
        S sum = 0;
        FUSOR_OMP_SIMD(reduction(+ : sum))
        for (index_t x = 0; x < d; ++x) sum += gr[x] * convert<S>(yr[x]);
        delta[r] = sum;
        lse[r] = convert<S>(w.lse.at(b, h, t0 + r));
      }
      std::fill(dq, dq + B * dp, S(0));
      for (index_t j = 0; j <= i; ++j) {
        const index_t key_rows = round_up(std::min(B, g.time - j * B), host_tile_rows);
        const S* k = keys + j * B * dp;
        const S* v = values + j * B * dp;
        if (j == i) {
          host_tile_product<false, tile_triangle::columns_from_row>(pt, B, k, dp, qt, B, key_rows, B, d);
          host_tile_product<false, tile_triangle::columns_from_row>(dst, B, v, dp, dyt, B, key_rows, B, d);
        } else {
          host_tile_product<false>(pt, B, k, dp, qt, B, key_rows, B, d);    // S^T = K Q^T
          host_tile_product<false>(dst, B, v, dp, dyt, B, key_rows, B, d);  // dP^T = V dY^T
        }
        for (index_t r = 0; r < key_rows; ++r) {
          S* p = pt + r * B;
          if (j == i) std::fill(p, p + r, -std::numeric_limits<S>::infinity());  // queries before key r
          attention_gradient_row(p, dst + r * B, lse, delta, B);
        }
        for (index_t r = 0; r < key_rows; ++r)
          for (index_t c = 0; c < B; ++c) ds[c * B + r] = dst[r * B + c];
        S* dkj = dk + j * B * dp;
        S* dvj = dv + j * B * dp;
        const index_t query_rows = round_up(rows, host_tile_rows);
        if (j == i) {
          host_tile_product<true, tile_triangle::inner_from_row>(dvj, dp, pt, B, dy, dp, key_rows, dp, B);
          host_tile_product<true, tile_triangle::inner_from_row>(dkj, dp, dst, B, q, dp, key_rows, dp, B);
          host_tile_product<true, tile_triangle::inner_to_row>(dq, dp, ds, B, k, dp, query_rows, dp, key_rows);
        } else {
          host_tile_product<true>(dvj, dp, pt, B, dy, dp, key_rows, dp, B);         // dV += P^T dY
          host_tile_product<true>(dkj, dp, dst, B, q, dp, key_rows, dp, B);         // dK += dS^T Q scale
          host_tile_product<true>(dq, dp, ds, B, k, dp, query_rows, dp, key_rows);  // dQ += dS K
        }
      }
      for (index_t r = 0; r < rows; ++r) {
        DQKV* out = w.dqkv.row(b, t0 + r) + g.query_column(h);
        const S* dqr = dq + r * dp;
        FUSOR_OMP_SIMD()
        for (index_t x = 0; x < d; ++x) out[x] = convert<DQKV>(dqr[x] * scale);
      }
    }
  }
  for (index_t t = 0; t < g.time; ++t) {
    DQKV* out_k = w.dqkv.row(b, t) + g.key_column(kv);
    DQKV* out_v = w.dqkv.row(b, t) + g.value_column(kv);
    const S* dkr = dk + t * dp;
    const S* dvr = dv + t * dp;
    FUSOR_OMP_SIMD()
    for (index_t x = 0; x < d; ++x) {
      out_k[x] = convert<DQKV>(dkr[x]);
      out_v[x] = convert<DQKV>(dvr[x]);
    }
  }
}

template <class DQKV, class DY, class QKV, class Y, class L>
void attention_backward_host(const attention_backward<DQKV, DY, QKV, Y, L>& w, const host_executor& ex) {
  using S = attention_compute_t<QKV>;
  constexpr index_t B = attention_host_block;
  const attention_geometry& g = w.shape;
  if (g.batch == 0 || g.time == 0) return;
  const index_t blocks = (g.time + B - 1) / B, tasks = g.batch * g.kv_heads;
  const index_t dp = round_up(g.head_dim, host_tile_columns<S>);
  const int team = attention_team(ex, g.batch * g.heads * g.time * g.time * g.head_dim, tasks);
#if FUSOR_HAS_OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
#endif
  {
    const index_t sequence = blocks * B * dp;
    host_scratch<S> rows(4 * sequence);  // keys, values, dk, dv
    host_scratch<S> scratch(5 * B * dp + 3 * B * B + 2 * B);
#if FUSOR_HAS_OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (index_t task = 0; task < tasks; ++task)
      attention_backward_group(w, task / g.kv_heads, task % g.kv_heads, rows.data(), rows.data() + sequence,
                               rows.data() + 2 * sequence, rows.data() + 3 * sequence, scratch.data());
  }
  (void)team;
}

}  // namespace FUSOR_HOST_VECTOR_NAMESPACE
}  // namespace fusor::detail
