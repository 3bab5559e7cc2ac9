// fusor/kernels/matmul_host.hpp — matmul under the host executor: OpenBLAS
// (cblas_sgemm / cblas_dgemm, one call per matrix of a batch that does not
// flatten: Debian's OpenBLAS 0.3.21 has no cblas_sgemm_batch), and the same epilogues cuBLASLt fuses, applied in one pass over the
// product that also converts it to c's element type.
//
// bf16/fp16 operands are converted to fp32 (one fusor pass each, parallel over
// rows) and multiplied by cblas_sgemm, accumulating in fp32 as cuBLASLt does;
// where OpenBLAS exports its bf16 GEMM (FUSOR_OPENBLAS_HAS_SBGEMM, detected by
// CMake) bf16 operands go to cblas_sbgemm directly. tf32 is exact fp32 here.
// OpenBLAS's own threads run the GEMM; fusor's passes use OpenMP. Where both
// share few cores, libgomp's default spin-waiting collides with OpenBLAS's:
// OMP_WAIT_POLICY=passive (or an OpenMP build of OpenBLAS) avoids it
// (bench/RESULTS.md, matmul section).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/matmul_epilogue.hpp"
#include "fusor/kernels/matmul_layout.hpp"
#include "fusor/kernels/reduce_host.hpp"
#include "fusor/kernels/reduce_ops.hpp"

// OpenBLAS's cblas.h declares a global `bfloat16` (uint16_t), which would make
// `bfloat16` ambiguous wherever a user writes `using namespace fusor;`.
#pragma push_macro("bfloat16")
#undef bfloat16
#define bfloat16 fusor_openblas_bfloat16
#include <cblas.h>
#undef bfloat16
#pragma pop_macro("bfloat16")

namespace fusor::detail {

// The type the host GEMM multiplies in: fp64 for fp64 operands, fp32 otherwise.
template <class In>
using host_gemm_t = std::conditional_t<std::is_same_v<In, double>, double, float>;

#if defined(FUSOR_OPENBLAS_HAS_SBGEMM) && FUSOR_OPENBLAS_HAS_SBGEMM
inline constexpr bool openblas_has_sbgemm = true;
#else
inline constexpr bool openblas_has_sbgemm = false;
#endif

// Whether the GEMM reads operands of type In as they are (no conversion pass).
template <class In>
inline constexpr bool host_gemm_reads_directly =
    std::is_same_v<In, host_gemm_t<In>> || (openblas_has_sbgemm && std::is_same_v<In, bfloat16>);

inline int blas_int(index_t value, const char* what) {
  if (value < 0 || value > INT_MAX)
    throw error(std::string("fusor: matmul's ") + what + " (" + std::to_string(value) +
                ") does not fit BLAS's 32-bit integers");
  return static_cast<int>(value);
}

// D = op(A) op(B) for every matrix of the batch, through cblas (column-major).
template <class In, class Out>
void host_gemm(const gemm_problem& p) {
  const int m = blas_int(p.m, "row count"), n = blas_int(p.n, "column count"), k = blas_int(p.k, "inner dimension");
  const int lda = blas_int(p.a.ld, "leading dimension"), ldb = blas_int(p.b.ld, "leading dimension"),
            ldd = blas_int(p.d.ld, "leading dimension");
  const auto op = [](bool transposed) { return transposed ? CblasTrans : CblasNoTrans; };
  for (index_t batch = 0; batch < p.batch; ++batch) {
    const In* a = static_cast<const In*>(p.a.data) + batch * p.a.batch_stride;
    const In* b = static_cast<const In*>(p.b.data) + batch * p.b.batch_stride;
    Out* d = static_cast<Out*>(p.d.data) + batch * p.d.batch_stride;
    if constexpr (std::is_same_v<In, double>) {
      cblas_dgemm(CblasColMajor, op(p.a.transposed), op(p.b.transposed), m, n, k, 1.0, a, lda, b, ldb, 0.0, d, ldd);
    } else if constexpr (std::is_same_v<In, float>) {
      cblas_sgemm(CblasColMajor, op(p.a.transposed), op(p.b.transposed), m, n, k, 1.0f, a, lda, b, ldb, 0.0f, d, ldd);
    } else {
      static_assert(std::is_same_v<In, bfloat16> && openblas_has_sbgemm, "fusor: no host GEMM for this type");
#if defined(FUSOR_OPENBLAS_HAS_SBGEMM) && FUSOR_OPENBLAS_HAS_SBGEMM
      cblas_sbgemm(CblasColMajor, op(p.a.transposed), op(p.b.transposed), m, n, k, 1.0f,
                   reinterpret_cast<const std::uint16_t*>(a), lda, reinterpret_cast<const std::uint16_t*>(b), ldb,
                   0.0f, d, ldd);  // OpenBLAS's bfloat16 is a uint16_t
#endif
    }
  }
}

// A matmul operand in the GEMM's type: the view itself, or a converted copy.
template <class G, class V>
struct host_gemm_input {
  tensor<G, dextents<index_t, V::rank>> converted;
  matrix_strides strides;
};
template <class G, class V>
host_gemm_input<G, V> host_gemm_input_of(const V& v, const host_executor& executor) {
  host_gemm_input<G, V> in;
  if constexpr (host_gemm_reads_directly<typename V::element_type>) {
    in.strides = strides_of(v);
  } else {
    in.converted = tensor<G, dextents<index_t, V::rank>>(dextents<index_t, V::rank>(v.extents()));
    assign(in.converted, v, executor);
    in.strides = strides_of(in.converted.view());
  }
  return in;
}

// Typed access to row i of matrix `batch` of a matrix_strides.
template <class T>
struct matrix_rows {
  T* data;
  index_t batch_stride, row_stride;
  explicit matrix_rows(const matrix_strides& m)
      : data(static_cast<T*>(m.data)), batch_stride(m.batch_stride), row_stride(m.row_stride) {}
  T* row(index_t batch, index_t i) const { return data + batch * batch_stride + i * row_stride; }
};

// One loop (OpenMP over rows, or over blocks of 64 columns when a bias gradient
// sums down the columns, so every sum runs in row order whatever the thread
// count). Rows of c, of the product and of the pre-activation are contiguous
// (check_epilogue; the scratch product is row-major).
template <class E, class Out, class G>
void host_fused_epilogue(const E& ep, const matrix_strides& c_strides, const matrix_strides& acc_strides,
                         const host_executor& executor) {
  const matrix_rows<Out> c(c_strides);
  const matrix_rows<const G> acc(acc_strides);
  const index_t rows = c_strides.rows, cols = c_strides.cols, all_rows = c_strides.batch * rows;
  // The pre-activation matrix, when the epilogue writes or reads one (else unused).
  const auto pre = [&] {
    if constexpr (E::has_aux && !E::relu_like) return matrix_rows<Out>(strides_of(ep.aux));
    else return matrix_rows<Out>(c_strides);
  }();
  const auto kernel = [&](index_t r, index_t j0, index_t j1, G* sums) {
    const index_t batch = r / rows, i = r % rows;
    Out* out = c.row(batch, i);
    const G* in = acc.row(batch, i);
    [[maybe_unused]] Out* pre_row = pre.row(batch, i);
    [[maybe_unused]] std::uint8_t* mask_bits = nullptr;
    [[maybe_unused]] index_t first_bit = 0;
    if constexpr (E::relu_like && E::has_aux) mask_bits = ep.aux.bits, first_bit = r * ep.aux.row_bits;
    for (index_t j = j0; j < j1; ++j) {
      G v = in[j];
      if constexpr (E::backward) {
        if constexpr (E::relu_like) {
          const index_t bit = first_bit + j;
          v = (mask_bits[bit / 8] >> (bit % 8)) & 1 ? v : G(0);
        } else {
          v *= gelu_tanh_derivative(convert<G>(pre_row[j]));
        }
        if constexpr (E::has_gradient) sums[j - j0] += v;
      } else {
        if constexpr (E::has_bias) v += convert<G>(ep.bias.data()[j]);
        if constexpr (E::has_aux) {
          if constexpr (E::relu_like) {
            const index_t bit = first_bit + j;
            std::uint8_t& byte = mask_bits[bit / 8];
            byte = static_cast<std::uint8_t>(v > G(0) ? byte | (1u << (bit % 8)) : byte & ~(1u << (bit % 8)));
          } else {
            pre_row[j] = convert<Out>(v);
          }
        }
        if constexpr (E::op == epilogue_op::relu) v = v < G(0) ? G(0) : v;
        if constexpr (E::op == epilogue_op::gelu_tanh) v = gelu_tanh_value(v);
      }
      out[j] = convert<Out>(v);
    }
  };
  [[maybe_unused]] const int team = executor.thread_count(all_rows * cols);
  if constexpr (E::has_gradient) {
    constexpr index_t block = 64;  // multiple of 8: relu mask bytes never shared by two blocks
    const index_t blocks = (cols + block - 1) / block;
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
    for (index_t blk = 0; blk < blocks; ++blk) {
      const index_t j0 = blk * block, j1 = std::min(cols, j0 + block);
      G sums[block] = {};
      for (index_t r = 0; r < all_rows; ++r) kernel(r, j0, j1, sums);
      for (index_t j = j0; j < j1; ++j) ep.gradient.data()[j] = convert<Out>(sums[j - j0]);
    }
  } else {
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
    for (index_t r = 0; r < all_rows; ++r) kernel(r, 0, cols, nullptr);
  }
}

// db[i] = sum_k a[i, k] (bias_gradient_a) or db[j] = sum_k b[k, j]
// (bias_gradient_b), from the operand as stored, accumulated in G: fusor's
// sum along an axis (reduce_host.hpp), which keeps a tile of sums at a time
// where the summed axis is not the innermost (a Linear layer's dy [tokens,
// features] read as dy^T), so every load is contiguous.
template <class G, class E, class AV, class BV>
void host_input_bias_gradient(const E& ep, const AV& a, const BV& b, const host_executor& executor) {
  const auto db = as_expression(ep.gradient);
  const reduction<reduction_kind::sum, G> sum{};
  if constexpr (E::op == epilogue_op::bias_gradient_a)
    host_reduce_axis(sum, make_reduction_input(as_expression(a), 1), db, executor);
  else
    host_reduce_axis(sum, make_reduction_input(as_expression(b), 0), db, executor);
}

// The host matmul: shapes are checked by matmul(); layouts and the epilogue here.
template <class CV, class AV, class BV, class E>
void run_matmul(const host_executor& executor, const CV& c, const AV& a, const BV& b, const E& ep) {
  static_assert(CV::space::host_accessible && AV::space::host_accessible && BV::space::host_accessible,
                "fusor: the host executor's matmul needs host-accessible memory (host or pinned)");
  static_assert(epilogue_in_space<E>(true),
                "fusor: the host executor's matmul epilogue needs its bias, pre-activation, mask and bias gradient "
                "in host-accessible memory");
  using In = typename AV::element_type;
  using Out = typename CV::element_type;
  using G = host_gemm_t<In>;
  const matrix_strides cs = strides_of(c), as = strides_of(a), bs = strides_of(b);
  const auto [aux_row_stride, aux_batch_stride] = check_epilogue(ep, cs, as, CV::rank == 3);
  // The plan the GPU would run: the same layout errors on both executors.
  const gemm_problem plan = plan_gemm(cs, as, bs, aux_row_stride, aux_batch_stride);
  check_epilogue_plan(ep, plan);

  // The product in G: written into c when c holds G, else into a row-major scratch.
  constexpr bool into_c = std::is_same_v<Out, G>;
  using scratch_t = tensor<G, dextents<index_t, CV::rank>>;
  scratch_t scratch;
  matrix_strides acc = cs;
  if constexpr (!into_c) {
    scratch = scratch_t(dextents<index_t, CV::rank>(c.extents()));
    acc = strides_of(scratch.view());
  }
  if constexpr (host_gemm_reads_directly<In>) {
    host_gemm<In, G>(into_c ? plan : plan_gemm(acc, as, bs));
  } else {
    const auto a_in = host_gemm_input_of<G>(a, executor);
    const auto b_in = host_gemm_input_of<G>(b, executor);
    host_gemm<G, G>(plan_gemm(acc, a_in.strides, b_in.strides));
  }

  if constexpr (is_fused_epilogue_v<E>) {
    if constexpr (E::input_gradient) {
      host_input_bias_gradient<G>(ep, a, b, executor);
      if constexpr (!into_c) assign(c, scratch, executor);
    } else {
      host_fused_epilogue<E, Out, G>(ep, cs, acc, executor);
    }
  } else if constexpr (is_expression_epilogue_v<E>) {
    if constexpr (into_c) assign(c, ep.function(c), executor);
    else assign(c, ep.function(scratch.view()), executor);
  } else if constexpr (!into_c) {
    assign(c, scratch, executor);
  }
}

}  // namespace fusor::detail
