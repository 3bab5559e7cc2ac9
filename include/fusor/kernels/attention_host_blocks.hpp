// fusor/kernels/attention_host_blocks.hpp — the block arithmetic of the host
// attention kernels (attention_host.hpp): one register-tiled block product
// (host_tile_product) that GCC turns into AVX FMAs, a vectorised exp, the
// softmax's row loops, and blocks of a head copied in as fp32 (fp64 for fp64
// data) with zero padding to whole register tiles; bf16/fp16 rows are
// converted as they are copied in.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/attention_operands.hpp"
#include "fusor/kernels/rows_host.hpp"

// The vector width (below) sets the blocks' padding and the tiles' code, so
// this header and attention_host.hpp live in an inline namespace named by it:
// translation units of one program compiled with and without -mavx get
// functions of different names, where the same names would be one definition
// to the linker, which could pair 32-byte tiles with blocks padded for 16.
#if defined(__AVX__)
#define FUSOR_HOST_VECTOR_NAMESPACE vectors_of_32_bytes
#else
#define FUSOR_HOST_VECTOR_NAMESPACE vectors_of_16_bytes
#endif

namespace fusor::detail {
inline namespace FUSOR_HOST_VECTOR_NAMESPACE {

// ---- the block product ---------------------------------------------------------------------
inline constexpr index_t attention_host_block = 64;  // query and key rows per block

// Vector types of the target's registers: AVX's 32 bytes where the compiler may
// use AVX, SSE's 16 bytes otherwise. Wider than the registers, GCC spills: the
// 32-byte tiles compiled for SSE2 (x86-64's baseline) were 62% of a host GPT
// step, 16-byte ones 10% of a step 2.8x shorter.
#if defined(__AVX__)
inline constexpr int host_vector_bytes = 32;
#else
inline constexpr int host_vector_bytes = 16;
#endif
template <class S>
struct host_vector;
template <>
struct host_vector<float> {
  typedef float type __attribute__((vector_size(host_vector_bytes), aligned(4), may_alias));
};
template <>
struct host_vector<double> {
  typedef double type __attribute__((vector_size(host_vector_bytes), aligned(8), may_alias));
};
template <class S>
inline constexpr index_t host_vector_lanes = index_t(host_vector_bytes / sizeof(S));
// Columns of one register tile: two vectors; padded widths are multiples of it.
template <class S>
inline constexpr index_t host_tile_columns = 2 * host_vector_lanes<S>;
inline constexpr index_t host_tile_rows = 4;  // what m must be a multiple of

FUSOR_FORCE_INLINE index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

// Which part of a diagonal block a product needs, per tile of rows [i, i + MR):
// the causal mask makes the rest zero (P, dS) or masks it afterwards (S).
enum class tile_triangle {
  whole,
  columns_to_row,    // columns c < i + MR (scores of queries against the keys before them)
  columns_from_row,  // columns c >= i, to a whole tile (scores of keys against the queries after them)
  inner_to_row,      // inner p < i + MR (P V, dS K: keys up to the query)
  inner_from_row,    // inner p >= i (P^T dY, dS^T Q: queries from the key on)
};

// Rows [0, MR) of C (+)= A B over columns [0, 2 vectors) and inner [0, k):
// 2 MR accumulators stay in registers over the whole loop.
template <int MR, bool Accumulate, class S>
FUSOR_FORCE_INLINE void host_tile(S* c, index_t ldc, const S* a, index_t lda, const S* b, index_t ldb, index_t k) {
  using vec = typename host_vector<S>::type;
  constexpr index_t lanes = host_vector_lanes<S>;
  vec acc[MR][2];
  FUSOR_UNROLL
  for (int r = 0; r < MR; ++r) {
    if constexpr (Accumulate) {
      acc[r][0] = *reinterpret_cast<const vec*>(c + r * ldc);
      acc[r][1] = *reinterpret_cast<const vec*>(c + r * ldc + lanes);
    } else {
      acc[r][0] = vec{};
      acc[r][1] = vec{};
    }
  }
  for (index_t p = 0; p < k; ++p, b += ldb) {
    const vec b0 = *reinterpret_cast<const vec*>(b), b1 = *reinterpret_cast<const vec*>(b + lanes);
    FUSOR_UNROLL
    for (int r = 0; r < MR; ++r) {
      const S x = a[r * lda + p];
      acc[r][0] += b0 * x;
      acc[r][1] += b1 * x;
    }
  }
  FUSOR_UNROLL
  for (int r = 0; r < MR; ++r) {
    *reinterpret_cast<vec*>(c + r * ldc) = acc[r][0];
    *reinterpret_cast<vec*>(c + r * ldc + lanes) = acc[r][1];
  }
}

// C (+)= A B for row-major blocks: A is m x k, B is k x n, C is m x n, with
// m a multiple of 4 and n of host_tile_columns. Tiles of 6 rows (12
// accumulators and 2 vectors of B: 15 of the 16 SSE or AVX registers), the last rows in
// tiles of 4. Triangle: the part of a diagonal block that is needed.
template <bool Accumulate, tile_triangle Triangle = tile_triangle::whole, class S>
void host_tile_product(S* c, index_t ldc, const S* a, index_t lda, const S* b, index_t ldb, index_t m, index_t n,
                       index_t k) {
  constexpr index_t columns = host_tile_columns<S>;
  const auto rows = [&](auto tile_rows, index_t i) {
    constexpr int MR = decltype(tile_rows)::value;
    index_t j0 = 0, j1 = n, p0 = 0, p1 = k;
    if constexpr (Triangle == tile_triangle::columns_to_row) j1 = std::min(n, round_up(i + MR, columns));
    if constexpr (Triangle == tile_triangle::columns_from_row) j0 = i / columns * columns;
    if constexpr (Triangle == tile_triangle::inner_to_row) p1 = std::min(k, i + MR);
    if constexpr (Triangle == tile_triangle::inner_from_row) p0 = std::min(k, i);
    for (index_t j = j0; j < j1; j += columns)
      host_tile<MR, Accumulate>(c + i * ldc + j, ldc, a + i * lda + p0, lda, b + p0 * ldb + j, ldb, p1 - p0);
  };
  const index_t six_row_tiles = m / 6 / 2 * 2;  // an even count, so that the rest is a multiple of 4
  index_t i = 0;
  for (; i < six_row_tiles * 6; i += 6) rows(std::integral_constant<int, 6>{}, i);
  for (; i < m; i += 4) rows(std::integral_constant<int, 4>{}, i);
}

// A thread's scratch: blocks of S, 64-byte aligned, zeroed when made.
template <class S>
class host_scratch {
 public:
  explicit host_scratch(index_t count)
      : data_(static_cast<S*>(std::aligned_alloc(64, std::size_t(round_up(count * index_t(sizeof(S)), 64))))) {
    if (!data_) throw std::bad_alloc();
    std::fill(data_.get(), data_.get() + count, S(0));
  }
  S* data() const { return data_.get(); }

 private:
  struct free_deleter {
    void operator()(S* p) const { std::free(p); }
  };
  std::unique_ptr<S, free_deleter> data_;
};

// A block of 64 rows of one head (rows past `rows` and columns past d are
// zero), times `scale`, as a row-major 64 x padded_d block of row stride
// `width`, or transposed (padded_d x 64, row stride `width`) for `Transposed`.
template <bool Transposed, class S, class T>
void load_attention_block(S* out, index_t width, const attention_rows<T>& in, index_t b, index_t t0, index_t rows,
                          index_t column, index_t d, index_t padded_d, S scale) {
  constexpr index_t B = attention_host_block;
  for (index_t r = 0; r < (Transposed ? padded_d : B); ++r)
    std::fill(out + r * width, out + r * width + (Transposed ? B : padded_d), S(0));
  if constexpr (Transposed) {
    // Written a row at a time: stores a row of `width` apart alias in the
    // store buffer (4 KiB apart at width 1024) and cost more than strided loads.
    const T* src = in.row(b, t0) + column;
    const index_t stride = in.time_stride;
    for (index_t x = 0; x < d; ++x) {
      S* dst = out + x * width;
      for (index_t r = 0; r < rows; ++r) dst[r] = convert<S>(src[r * stride + x]) * scale;
    }
  } else {
    for (index_t r = 0; r < rows; ++r) {
      const T* src = in.row(b, t0 + r) + column;
      S* dst = out + r * width;
      FUSOR_OMP_SIMD()
      for (index_t x = 0; x < d; ++x) dst[x] = convert<S>(src[x]) * scale;
    }
  }
}

// exp of eight floats at once: rows_host.hpp's host_exp in GCC vector
// operations. GCC 12 leaves host_exp's loops scalar here (under the default
// -ftrapping-math its clamps may not be speculated), and the exp is a third
// of the forward's work.
// In place: a vector return value would change the ABI between -mavx and not (-Wpsabi).
FUSOR_FORCE_INLINE void host_exp_vector(host_vector<float>::type& x) {
  using vec = host_vector<float>::type;
  typedef int ints __attribute__((vector_size(host_vector_bytes)));
  const vec low = vec{} - 104.0f, high = vec{} + 89.0f;
  vec clamped = x > low ? x : low;  // NaN: low, replaced below
  clamped = clamped < high ? clamped : high;
  const vec k = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  vec r = clamped - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  vec p = vec{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const ints k_int = __builtin_convertvector(k, ints), half = k_int >> 1;
  const vec result = p * (vec)((half + 127) << 23) * (vec)((k_int - half + 127) << 23);
  x = x != x ? x : result;
}

// Row loops of the softmax, over rows of a multiple of 16 (fp32) or 8 (fp64) elements.
template <class S>
S attention_row_max(const S* s, index_t n) {
  S m = -std::numeric_limits<S>::infinity();
  FUSOR_OMP_SIMD(reduction(max : m))
  for (index_t c = 0; c < n; ++c) m = s[c] > m ? s[c] : m;
  return m;
}
// s = exp(s - shift); returns the sum.
template <class S>
S attention_exp_row(S* s, index_t n, S shift) {
  if constexpr (std::is_same_v<S, float>) {
    using vec = host_vector<float>::type;
    vec sum{};
    for (index_t c = 0; c < n; c += host_vector_lanes<float>) {
      vec& x = *reinterpret_cast<vec*>(s + c);
      x -= shift;
      host_exp_vector(x);
      sum += x;
    }
    S total = 0;
    for (int lane = 0; lane < host_vector_lanes<float>; ++lane) total += sum[lane];
    return total;
  } else {
    S sum = 0;
    for (index_t c = 0; c < n; ++c) sum += s[c] = host_exp(s[c] - shift);
    return sum;
  }
}
template <class S>
void attention_scale_row(S* o, index_t n, S factor) {
  FUSOR_OMP_SIMD()
  for (index_t c = 0; c < n; ++c) o[c] *= factor;
}
// One key's row of the backward: p = exp(s - lse) per query, and ds = p (dp - delta) in place of dp.
template <class S>
void attention_gradient_row(S* p, S* ds, const S* lse, const S* delta, index_t n) {
  if constexpr (std::is_same_v<S, float>) {
    using vec = host_vector<float>::type;
    for (index_t c = 0; c < n; c += host_vector_lanes<float>) {
      vec& probability = *reinterpret_cast<vec*>(p + c);
      vec& gradient = *reinterpret_cast<vec*>(ds + c);
      probability -= *reinterpret_cast<const vec*>(lse + c);
      host_exp_vector(probability);
      gradient = probability * (gradient - *reinterpret_cast<const vec*>(delta + c));
    }
  } else {
    for (index_t c = 0; c < n; ++c) {
      p[c] = host_exp(p[c] - lse[c]);
      ds[c] = p[c] * (ds[c] - delta[c]);
    }
  }
}

// OpenMP threads for `tasks` independent tasks of `work` element-steps in all.
inline int attention_team(const host_executor& ex, index_t work, index_t tasks) {
  return int(std::max<index_t>(1, std::min<index_t>(ex.thread_count(work), tasks)));
}

}  // namespace FUSOR_HOST_VECTOR_NAMESPACE
}  // namespace fusor::detail
