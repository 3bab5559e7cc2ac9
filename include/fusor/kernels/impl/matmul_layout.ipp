// fusor/kernels/impl/matmul_layout.ipp — definitions of fusor/kernels/matmul_layout.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/kernels/matmul_layout.hpp"

namespace fusor::detail {

FUSOR_DECL std::string matrix_shape_string(const matrix_strides& m, bool batched) {
  std::string s = "[";
  if (batched) s += std::to_string(m.batch) + ", ";
  return s + std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]";
}

FUSOR_DECL std::string matrix_strides_string(const matrix_strides& m) {
  std::string s = "[";
  s += std::to_string(m.row_stride) + ", ";
  return s + std::to_string(m.col_stride) + "]";
}

FUSOR_DECL void check_matmul_shapes(const matrix_strides& c, const matrix_strides& a, const matrix_strides& b,
                                bool c_batched, bool a_batched, bool b_batched) {
  const auto shapes = [&] {
    return std::string("c ") + matrix_shape_string(c, c_batched) + " = a " + matrix_shape_string(a, a_batched) + " times b " +
           matrix_shape_string(b, b_batched);
  };
  if (a.cols != b.rows)
    throw shape_error(std::string("fusor: matmul's inner dimensions differ: a ") + matrix_shape_string(a, a_batched) +
                      " has " + std::to_string(a.cols) + " columns, b " + matrix_shape_string(b, b_batched) +
                      " has " + std::to_string(b.rows) + " rows");
  if (c.rows != a.rows || c.cols != b.cols || (a.batch != 1 && a.batch != c.batch) || (b.batch != 1 && b.batch != c.batch))
    throw shape_error(std::string("fusor: matmul's shapes do not agree: ") + shapes());
  if (c.rows == 0 || c.cols == 0 || a.cols == 0 || c.batch == 0)
    throw shape_error(std::string("fusor: matmul of empty matrices is not supported: ") + shapes());
}

[[noreturn]] FUSOR_DECL void throw_unsupported_strides(const char* name, const matrix_strides& m) {
  throw error(std::string("fusor: matmul's ") + name + " has strides " + matrix_strides_string(m) +
              " for shape [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) +
              "]: BLAS needs unit stride along one of its two axes (row-major, column-major or a transposed view); "
              "copy it into a tensor with assign() first");
}

FUSOR_DECL gemm_problem plan_gemm(const matrix_strides& c, const matrix_strides& a, const matrix_strides& b,
                              index_t aux_row_stride, index_t aux_batch_stride) {
  gemm_problem p;
  p.batch = c.batch;
  p.k = a.cols;
  const index_t a_batch_stride = a.batch == 1 ? 0 : a.batch_stride;
  const index_t b_batch_stride = b.batch == 1 ? 0 : b.batch_stride;
  const index_t c_batch_stride = c.batch == 1 ? 0 : c.batch_stride;
  gemm_operand first, second;
  if (rows_contiguous(c)) {
    // D = c^T [N, M] = b^T [N, K] times a^T [K, M].
    p.swapped = true;
    p.m = c.cols;
    p.n = c.rows;
    gemm_operand_of(c.data, c.cols, c.rows, c.col_stride, c.row_stride, c_batch_stride, p.d);
    if (!gemm_operand_of(b.data, b.cols, b.rows, b.col_stride, b.row_stride, b_batch_stride, first))
      throw_unsupported_strides("b", b);
    if (!gemm_operand_of(a.data, a.cols, a.rows, a.col_stride, a.row_stride, a_batch_stride, second))
      throw_unsupported_strides("a", a);
  } else {
    p.m = c.rows;
    p.n = c.cols;
    if (!gemm_operand_of(c.data, c.rows, c.cols, c.row_stride, c.col_stride, c_batch_stride, p.d) || p.d.transposed)
      throw_unsupported_strides("c (the destination)", c);
    if (!gemm_operand_of(a.data, a.rows, a.cols, a.row_stride, a.col_stride, a_batch_stride, first))
      throw_unsupported_strides("a", a);
    if (!gemm_operand_of(b.data, b.rows, b.cols, b.row_stride, b.col_stride, b_batch_stride, second))
      throw_unsupported_strides("b", b);
  }
  p.a = first;
  p.b = second;

  // A batch of a [B, M, K] times a shared b [K, N] into c [B, M, N] is one GEMM
  // of B * M rows when a's and c's matrices follow each other in memory.
  const auto follows = [&](index_t batch_stride, index_t row_stride) {
    return batch_stride == c.rows * row_stride;
  };
  if (p.swapped && p.batch > 1 && b.batch == 1 && a.batch == c.batch && !p.b.transposed &&
      follows(c.batch_stride, p.d.ld) && follows(a.batch_stride, p.b.ld) &&
      (aux_batch_stride < 0 || follows(aux_batch_stride, aux_row_stride))) {
    p.n *= p.batch;
    p.batch = 1;
    p.flattened = true;
  }
  return p;
}

}  // namespace fusor::detail
