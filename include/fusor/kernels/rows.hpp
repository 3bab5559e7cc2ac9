// fusor/kernels/rows.hpp — how the row-wise kernels (softmax, layernorm,
// rmsnorm, cross-entropy) see their operands, on the host and on the GPU.
//
// A view of any rank >= 1 is a stack of rows along its last axis: row r is the
// r-th multi-index of the leading axes in row-major order. Any strided layout
// works (transposed, sliced, column-major): a row starts where its leading
// indices say, and its elements are `column_stride` apart. Leading axes that are
// contiguous with each other are merged, so the common case costs one multiply
// per row. Per-row values (saved mean and rstd, losses, targets) are views whose
// shape is either [rows] or the leading shape of the rows' view; a weight or
// bias is a rank-1 view as long as a row. Everything here is trivially copyable
// so it can be a kernel parameter. The shape checks throw shape_error naming
// both shapes before anything runs.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <cuda/std/array>

#include "fusor/config.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/view.hpp"
#include "fusor/exec/host.hpp"

#if FUSOR_HAS_OPENMP
#include <omp.h>
#endif
#include <vector>

// `#pragma omp simd <clauses>` where OpenMP is on: the host loops over a row.
#define FUSOR_PRAGMA(text) _Pragma(#text)
#if FUSOR_HAS_OPENMP
#define FUSOR_OMP_SIMD(clauses) FUSOR_PRAGMA(omp simd clauses)
#else
#define FUSOR_OMP_SIMD(clauses)
#endif

namespace fusor {

// What the row-wise kernels take as an operand: a view or an lvalue tensor.
template <class T>
concept row_operand = is_view_v<std::remove_cvref_t<T>> || is_tensor_v<std::remove_cvref_t<T>>;

namespace detail {

// Leading axes a row-wise operand may have (views of rank up to 8), and the
// longest row (columns are int on the GPU).
inline constexpr int max_leading_axes = 7;
inline constexpr index_t max_row_length = (index_t(1) << 31) - (index_t(1) << 20);

// Offset of the start of row r, for the leading axes of a view. Axes are kept
// innermost first, after merging neighbours that are contiguous with each other.
struct row_offsets {
  int axes = 0;
  ::cuda::std::array<index_t, max_leading_axes> extent{};
  ::cuda::std::array<index_t, max_leading_axes> stride{};

  // Unrolled with constant indices, so a kernel reads its parameter in place
  // instead of copying the arrays to local memory.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t operator()(index_t r) const {
    if (axes <= 1) return axes == 1 ? r * stride[0] : 0;
    index_t offset = 0;
    FUSOR_UNROLL
    for (int k = 0; k < max_leading_axes; ++k) {
      if (k + 1 < axes) {
        offset += (r % extent[k]) * stride[k];
        r /= extent[k];
      } else if (k + 1 == axes) {
        offset += r * stride[k];
      }
    }
    return offset;
  }
};

// The first `leading` axes of v as row offsets.
template <class View>
row_offsets make_row_offsets(const View& v, std::size_t leading) {
  row_offsets o;
  for (std::size_t k = leading; k-- > 0;) {
    const index_t e = v.extent(k), s = v.stride(k);
    if (e == 1) continue;  // its stride never matters
    if (o.axes > 0 && o.stride[o.axes - 1] * o.extent[o.axes - 1] == s) {
      o.extent[o.axes - 1] *= e;
      continue;
    }
    o.extent[o.axes] = e;
    o.stride[o.axes] = s;
    ++o.axes;
  }
  return o;
}

// A view as rows along its last axis. T is the storage type (const for inputs).
template <class T>
struct row_matrix {
  T* data = nullptr;
  index_t rows = 0;
  index_t length = 0;
  index_t column_stride = 1;
  row_offsets offsets{};

  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T* row(index_t r) const { return data + offsets(r); }
  // Whether row r can be read 16 bytes at a time.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE bool vector_row(const T* row_start) const {
    return column_stride == 1 && reinterpret_cast<std::uintptr_t>(row_start) % 16 == 0;
  }
};

// One value per row (saved statistics, losses, targets).
template <class T>
struct per_row {
  T* data = nullptr;
  row_offsets offsets{};
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T& operator[](index_t r) const { return data[offsets(r)]; }
};

// One value per column: a weight or bias as long as a row.
template <class T>
struct per_column {
  T* data = nullptr;
  index_t stride = 1;
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T& operator[](index_t c) const { return data[c * stride]; }
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE bool vector_ok() const {
    return stride == 1 && reinterpret_cast<std::uintptr_t>(data) % 16 == 0;
  }
};

// What a row's statistics are computed in: fp32 for bf16/fp16/fp32, fp64 for fp64.
template <class Storage>
using statistic_t = accumulate_t<std::remove_const_t<Storage>>;

template <class V>
using view_t = std::remove_cvref_t<decltype(as_view(std::declval<const V&>()))>;
template <class V>
using element_of_t = typename view_t<V>::element_type;

// Elements per vector step of a kernel over operands of these storage types:
// 16 bytes of the narrowest one (the others move in several 16-byte chunks).
template <class... T>
inline constexpr int vector_lanes = int(16 / std::min({sizeof(T)...}));

// ---- checks -------------------------------------------------------------------------
template <class A, class B, bool Match>
struct row_shapes_must_match {
  static_assert(Match,
                "fusor: the static shapes of two operands of a row-wise kernel differ; both are named in "
                "row_shapes_must_match<shape<...>, shape<...>> (-1 is a dynamic extent)");
};
template <class EA, class EB>
constexpr bool static_extents_agree() {
  if constexpr (EA::rank() != EB::rank()) {
    return false;
  } else {
    for (std::size_t r = 0; r != EA::rank(); ++r)
      if (EA::static_extent(r) != dynamic && EB::static_extent(r) != dynamic &&
          EA::static_extent(r) != EB::static_extent(r))
        return false;
    return true;
  }
}

// Two operands with the same shape (an output and its input, x and dy, ...).
template <class A, class B>
void require_same_shape(const char* op, const char* a_name, const A& a, const char* b_name, const B& b) {
  using EA = typename A::extents_type;
  using EB = typename B::extents_type;
  [[maybe_unused]] row_shapes_must_match<shape_of_t<EA>, shape_of_t<EB>, static_extents_agree<EA, EB>()> check;
  if constexpr (EA::rank() == EB::rank()) {
    for (std::size_t r = 0; r != EA::rank(); ++r)
      if (a.extent(r) != b.extent(r))
        throw shape_error(std::string("fusor: ") + op + ": " + a_name + " has shape " + shape_string(a.extents()) +
                          " but " + b_name + " has shape " + shape_string(b.extents()) + "; they must be equal");
  }
}

template <class View>
row_matrix<typename View::element_type> rows_of(const View& v) {
  static_assert(View::rank >= 1 && View::rank <= max_leading_axes + 1,
                "fusor: a row-wise kernel needs a view of rank 1 to 8 (rows along the last axis)");
  row_matrix<typename View::element_type> m;
  m.data = v.data();
  m.length = v.extent(View::rank - 1);
  if (m.length > max_row_length)
    throw shape_error("fusor: rows of shape " + shape_string(v.extents()) + " are longer than the " +
                      std::to_string(max_row_length) + " elements a row-wise kernel takes");
  m.rows = 1;
  for (std::size_t k = 0; k + 1 < View::rank; ++k) m.rows *= v.extent(k);
  m.column_stride = v.stride(View::rank - 1);
  m.offsets = make_row_offsets(v, View::rank - 1);
  return m;
}
template <class T>
row_matrix<const T> as_input(const row_matrix<T>& m) {
  return {m.data, m.rows, m.length, m.column_stride, m.offsets};
}

// A per-row operand of `rows_view`'s rows: shape [rows] or the leading shape.
template <class PerRow, class Rows>
per_row<typename PerRow::element_type> per_row_of(const char* op, const char* name, const PerRow& v,
                                                  const Rows& rows_view) {
  constexpr std::size_t leading = Rows::rank - 1;
  const index_t rows = rows_of(rows_view).rows;
  bool fits = false;
  if constexpr (PerRow::rank == 1) fits = v.extent(0) == rows;
  if constexpr (PerRow::rank == leading) {
    bool same = true;
    for (std::size_t k = 0; k != leading; ++k) same = same && v.extent(k) == rows_view.extent(k);
    fits = fits || same;
  }
  if (!fits)
    throw shape_error(std::string("fusor: ") + op + ": " + name + " has shape " + shape_string(v.extents()) +
                      " but the rows have shape " + shape_string(rows_view.extents()) + "; it needs one value per row, [" +
                      std::to_string(static_cast<long long>(rows)) + "] or the leading shape");
  return {v.data(), make_row_offsets(v, PerRow::rank)};
}

// A per-column operand (weight, bias) of `rows_view`'s rows: shape [row length].
template <class PerColumn, class Rows>
per_column<typename PerColumn::element_type> per_column_of(const char* op, const char* name, const PerColumn& v,
                                                           const Rows& rows_view) {
  static_assert(PerColumn::rank == 1, "fusor: a weight or bias of a row-wise kernel is a rank-1 view");
  if (v.extent(0) != rows_view.extent(Rows::rank - 1))
    throw shape_error(std::string("fusor: ") + op + ": " + name + " has shape " + shape_string(v.extents()) +
                      " but the rows have shape " + shape_string(rows_view.extents()) +
                      "; it needs one value per column");
  return {v.data(), v.stride(0)};
}

// Whether an executor can reach every operand's memory.
template <class... Views>
inline constexpr bool host_reachable_v = (view_t<Views>::space::host_accessible && ...);
template <class... Views>
inline constexpr bool device_reachable_v = (view_t<Views>::space::device_accessible && ...);

// ---- the host side ---------------------------------------------------------------------
// body(r, scratch) for every row r, rows spread over the executor's OpenMP
// threads; scratch is a per-thread buffer of `scratch_size` values of S.
template <class S, class Body>
void for_each_row(const host_executor& ex, index_t rows, index_t length, index_t scratch_size, Body&& body) {
  const int team = ex.thread_count(rows * (length > 0 ? length : 1));
#if FUSOR_HAS_OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
#endif
  {
    std::vector<S> scratch(static_cast<std::size_t>(scratch_size));
#if FUSOR_HAS_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t r = 0; r < rows; ++r) body(r, scratch.data());
  }
  (void)team;
}

// exp on the host in a form the compiler vectorises (libm's expf is a call per
// element): 2^k * p(r) with k = round(x / ln 2) and Cephes' degree-6
// polynomial for |r| <= ln(2) / 2, within 2 ulp of expf. exp(NaN) = NaN,
// exp(+inf) = +inf (as does any overflow), exp(-inf) = 0. fp64 uses std::exp.
FUSOR_FORCE_INLINE float host_exp(float x) {
  const float clamped = x > -104.0f ? (x < 89.0f ? x : 89.0f) : -104.0f;  // NaN: -104, replaced below
  const float k = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = clamped - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^k as two normal powers of two, so k in [-150, 129] over- and underflows as expf does.
  const int k_int = int(k), half = k_int >> 1;
  const float scale_a = std::bit_cast<float>((half + 127) << 23);
  const float scale_b = std::bit_cast<float>((k_int - half + 127) << 23);
  const float result = p * scale_a * scale_b;
  return x != x ? x : result;
}
FUSOR_FORCE_INLINE double host_exp(double x) { return std::exp(x); }

// The sum of term(j) over j in [0, n): blocks of 1024 terms summed in
// vector lanes, then the block sums in order. A plain running sum of 10^5
// fp32 terms can lose 10^-4 relative; this loses about as much as the GPU's
// per-thread sums and tree do (10^-6).
template <class S, class Term>
FUSOR_FORCE_INLINE S row_sum(index_t n, Term&& term) {
  constexpr index_t block = 1024;
  S total = 0;
  for (index_t begin = 0; begin < n; begin += block) {
    const index_t end = begin + block < n ? begin + block : n;
    S partial = 0;
    FUSOR_OMP_SIMD(reduction(+ : partial))
    for (index_t j = begin; j < end; ++j) partial += term(j);
    total += partial;
  }
  return total;
}

// Two such sums in one pass over the row.
template <class S, class TermA, class TermB>
FUSOR_FORCE_INLINE std::pair<S, S> row_sums(index_t n, TermA&& term_a, TermB&& term_b) {
  constexpr index_t block = 1024;
  S total_a = 0, total_b = 0;
  for (index_t begin = 0; begin < n; begin += block) {
    const index_t end = begin + block < n ? begin + block : n;
    S a = 0, b = 0;
    FUSOR_OMP_SIMD(reduction(+ : a, b))
    for (index_t j = begin; j < end; ++j) {
      a += term_a(j);
      b += term_b(j);
    }
    total_a += a;
    total_b += b;
  }
  return {total_a, total_b};
}

// f(strides...) with every stride a compile-time 1 when all are 1, so the
// contiguous case vectorises; the run-time strides otherwise.
template <class F, class... Stride>
FUSOR_FORCE_INLINE void with_unit_strides(F&& f, Stride... strides) {
  if (((strides == 1) && ...))
    f((void(strides), std::integral_constant<index_t, 1>{})...);
  else
    f(index_t(strides)...);
}

}  // namespace detail
}  // namespace fusor
