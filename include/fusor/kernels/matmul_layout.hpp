// fusor/kernels/matmul_layout.hpp — how matmul reads its operands' layouts: the
// shape checks (static ones at compile time) and the translation of any mix of
// row-major, column-major and transposed views into the one column-major GEMM
// that BLAS and cuBLASLt run. Transposes and leading dimensions come from the
// strides; the user never passes a flag.
//
// c = a b (each c[i, j] = sum over k of a[i, k] b[k, j]) runs as the
// column-major D = op(A) op(B). When c's rows are contiguous (unit stride along
// its last axis), D is c's transpose, computed as b^T a^T ("swapped"): D's rows
// are then c's columns, which is what cuBLASLt's bias and bias-gradient
// epilogues index. Each input is stored either as itself (op N, column-major)
// or as its transpose (op T, row-major). The host and the CUDA executor share
// this plan, so the host tests check the layout logic the GPU runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/view.hpp"

namespace fusor {

/// Names the three static shapes of a matmul in the compiler's message: matmul checks them with
/// `static_assert(static_matmul_shapes_must_agree<...>::value, "fusor: ...")`.
template <class CShape, class AShape, class BShape, bool Agree>
struct static_matmul_shapes_must_agree {
  static constexpr bool value = Agree;  ///< Whether the shapes agree.
};

/// The message of a failed static_matmul_shapes_must_agree (one string literal, for static_assert).
#define FUSOR_MATMUL_SHAPES_MESSAGE                                                                                 \
  "fusor: matmul's static shapes do not agree (c [M, N] = a [M, K] times b [K, N], with an optional leading batch " \
  "axis): fix the extents so that a's columns are b's rows; the shapes are named in "                               \
  "static_matmul_shapes_must_agree<shape<c>, shape<a>, shape<b>> (-1 is a dynamic extent)"

namespace detail {

// ---- shapes -------------------------------------------------------------------
template <class E>
constexpr std::size_t static_rows() { return E::static_extent(E::rank() - 2); }
template <class E>
constexpr std::size_t static_cols() { return E::static_extent(E::rank() - 1); }
template <class E>
constexpr std::size_t static_batch() { return E::rank() == 3 ? E::static_extent(0) : 1; }

constexpr bool static_equal(std::size_t x, std::size_t y) { return x == dynamic || y == dynamic || x == y; }
// A batch extent of a or b agrees with c's when equal or when the operand is shared (2-D or batch 1).
constexpr bool static_batch_fits(std::size_t operand, std::size_t c) { return operand == 1 || static_equal(operand, c); }

template <class CE, class AE, class BE>
constexpr bool static_matmul_shapes_agree() {
  return static_equal(static_cols<AE>(), static_rows<BE>()) && static_equal(static_rows<AE>(), static_rows<CE>()) &&
         static_equal(static_cols<BE>(), static_cols<CE>()) && static_batch_fits(static_batch<AE>(), static_batch<CE>()) &&
         static_batch_fits(static_batch<BE>(), static_batch<CE>());
}

// static_matmul_shapes_must_agree for extents CE = AE BE: its value says whether their static extents agree.
template <class CE, class AE, class BE>
using static_matmul_check = static_matmul_shapes_must_agree<shape_of_t<CE>, shape_of_t<AE>, shape_of_t<BE>,
                                                            static_matmul_shapes_agree<CE, AE, BE>()>;

// ---- one matrix (or a batch of them) as strides ----------------------------------
struct matrix_strides {
  void* data = nullptr;
  index_t batch = 1, rows = 0, cols = 0;
  index_t batch_stride = 0, row_stride = 0, col_stride = 0;  // in elements; batch_stride 0: shared
};

template <class V>
matrix_strides strides_of(const V& v) {
  static_assert(V::rank == 2 || V::rank == 3, "fusor: matmul operands are matrices (2-D) or batches of them (3-D)");
  matrix_strides m;
  m.data = static_cast<void*>(v.data());
  if constexpr (V::rank == 3) {
    m.batch = v.extent(0);
    m.batch_stride = m.batch == 1 ? 0 : v.stride(0);
  }
  m.rows = v.extent(V::rank - 2);
  m.cols = v.extent(V::rank - 1);
  m.row_stride = v.stride(V::rank - 2);
  m.col_stride = v.stride(V::rank - 1);
  return m;
}

FUSOR_DECL std::string matrix_shape_string(const matrix_strides& m, bool batched);
FUSOR_DECL std::string matrix_strides_string(const matrix_strides& m);

// Run-time shape check: c [M, N] = a [M, K] b [K, N], batches equal or shared.
FUSOR_DECL void check_matmul_shapes(const matrix_strides& c, const matrix_strides& a, const matrix_strides& b,
                                bool c_batched, bool a_batched, bool b_batched);

// ---- the column-major GEMM --------------------------------------------------------
struct gemm_operand {
  void* data = nullptr;
  bool transposed = false;  // op T: memory holds this operand's transpose, column-major
  index_t ld = 1;           // leading dimension of what memory holds
  index_t batch_stride = 0; // elements between matrices; 0 when every batch shares one
};

// D [m, n] = op(A) [m, k] op(B) [k, n], `batch` times; D is column-major.
struct gemm_problem {
  index_t m = 0, n = 0, k = 0, batch = 1;
  gemm_operand a, b, d;
  bool swapped = false;    // D is c^T = b^T a^T: GEMM operand A is fusor's b, B is fusor's a
  bool flattened = false;  // a batch with a shared b, run as one GEMM of batch * M rows
};

// A matrix [rows, cols] with (row_stride, col_stride) as column-major memory of
// itself: unit row stride (or one row), and columns that do not overlap.
inline bool column_major_ld(index_t rows, index_t cols, index_t row_stride, index_t col_stride, index_t& ld) {
  if (row_stride != 1 && rows != 1) return false;
  ld = cols == 1 ? rows : col_stride;
  return ld >= rows;
}

// How GEMM reads a matrix: op N if its memory is column-major, op T if row-major.
inline bool gemm_operand_of(void* data, index_t rows, index_t cols, index_t row_stride, index_t col_stride,
                            index_t batch_stride, gemm_operand& out) {
  index_t ld = 0;
  if (column_major_ld(rows, cols, row_stride, col_stride, ld)) {
    out = {data, false, ld, batch_stride};
    return true;
  }
  if (column_major_ld(cols, rows, col_stride, row_stride, ld)) {
    out = {data, true, ld, batch_stride};
    return true;
  }
  return false;
}

[[noreturn]] FUSOR_DECL void throw_unsupported_strides(const char* name, const matrix_strides& m);

// Whether c's rows are contiguous: then D is c^T, and bias epilogues index c's columns.
inline bool rows_contiguous(const matrix_strides& c) {
  index_t ld = 0;
  return column_major_ld(c.cols, c.rows, c.col_stride, c.row_stride, ld);
}

// The GEMM that computes c = a b, shapes already checked. `aux_batch_stride`
// (elements, or -1 for none) is the batch stride of an epilogue's auxiliary
// matrix, which must flatten along with c.
FUSOR_DECL gemm_problem plan_gemm(const matrix_strides& c, const matrix_strides& a, const matrix_strides& b,
                              index_t aux_row_stride = -1, index_t aux_batch_stride = -1);

// Largest power of two (at most 256, cuBLASLt's default assumption) that
// divides a pointer: what cuBLASLt's heuristics are told about each operand.
inline unsigned alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  unsigned alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace detail
}  // namespace fusor

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/kernels/impl/matmul_layout.ipp"
#endif
