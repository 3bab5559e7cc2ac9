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

namespace fusor {

/// What the row-wise kernels take as an operand: a view or an lvalue tensor.
template <class T>
concept row_operand = is_view_v<std::remove_cvref_t<T>> || is_tensor_v<std::remove_cvref_t<T>>;

namespace detail {
// The row kernels' shape_errors, built once (not once per operand type): `a` and `b` must have equal shapes; a
// per-row operand must hold one value per row of `rows` rows.
[[noreturn]] FUSOR_DECL void throw_shapes_differ(const char* op, const char* a_name, const std::string& a_shape,
                                                const char* b_name, const std::string& b_shape);
[[noreturn]] FUSOR_DECL void throw_not_per_row(const char* op, const char* name, const std::string& shape,
                                              const std::string& rows_shape, index_t rows);

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
  // Whether every row's offset is r * single_step() (one leading axis after
  // merging, or none): kernels that check it once skip the general walk,
  // whose divisions cost registers even where they are not taken.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE bool single_axis() const { return axes <= 1; }
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t single_step() const { return axes == 1 ? stride[0] : 0; }
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
  // Whether every row can be read 16 bytes at a time and starts at
  // data + r * offsets.single_step().
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE bool uniform_vector_rows() const {
    return offsets.single_axis() && vector_row(data) && offsets.single_step() * index_t(sizeof(T)) % 16 == 0;
  }
};

// An expression read as rows of a destination's shape, which it may broadcast
// to: element j of row r is expression.at({leading index of r..., j}). Rows of
// an expression are read element by element (no 16-byte vectors).
template <class E, std::size_t Rank>
struct expression_rows {
  E expression;
  ::cuda::std::array<index_t, Rank> extent{};

  struct reader {
    E expression;
    ::cuda::std::array<index_t, Rank> index;
    FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE auto operator[](index_t j) const {
      ::cuda::std::array<index_t, Rank> at = index;
      at[Rank - 1] = j;
      return expression.at(at);
    }
  };
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE reader row(index_t r) const {
    reader out{expression, {}};
    FUSOR_UNROLL
    for (int k = int(Rank) - 2; k >= 0; --k) {
      out.index[k] = r % extent[k];
      r /= extent[k];
    }
    return out;
  }
};

// The value an element access of a row (pointer or expression reader) gives.
template <class In>
using row_value_t = std::remove_cvref_t<decltype(std::declval<const In&>()[0])>;

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
        throw_shapes_differ(op, a_name, shape_string(a.extents()), b_name, shape_string(b.extents()));
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
// An expression as rows of `destination`'s shape; it must broadcast to it.
template <class E, class D>
expression_rows<E, D::rank> expression_rows_of(const char* op, const E& e, const D& destination) {
  using EE = typename E::extents_type;
  static_assert(EE::rank() <= D::rank, "fusor: the expression has more axes than the output of the row-wise kernel");
  bool fits = true;
  for (std::size_t r = 0; r != EE::rank(); ++r) {
    const index_t de = destination.extent(D::rank - 1 - r), ee = e.extents().extent(EE::rank() - 1 - r);
    fits = fits && (de == ee || ee == 1);
  }
  if (!fits)
    throw shape_error(std::string("fusor: ") + op + ": an input expression of shape " + shape_string(e.extents()) +
                      " does not broadcast to the output's shape " + shape_string(destination.extents()));
  expression_rows<E, D::rank> x{e, {}};
  for (std::size_t k = 0; k != D::rank; ++k) x.extent[k] = destination.extent(k);
  return x;
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
    throw_not_per_row(op, name, shape_string(v.extents()), shape_string(rows_view.extents()), rows);
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

}  // namespace detail
}  // namespace fusor

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/kernels/impl/rows.ipp"
#endif
