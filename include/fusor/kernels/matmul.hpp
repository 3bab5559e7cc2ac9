// fusor/kernels/matmul.hpp — matrix products: matmul(c, a, b [, epilogue] [, executor])
// computes c = a b (c[i, j] = sum_k a[i, k] b[k, j]) for matrices (2-D views or
// tensors) and batches of them (3-D, leading batch axis, any batch stride; a
// 2-D operand is shared by every batch). OpenBLAS runs it under the host
// executor, cuBLASLt under the CUDA executor (one call, the epilogue fused).
// 4-D operands [B, H, M, N] (attention's batch and heads) are a batch of B * H:
// one strided-batched call where every 4-D operand's two batch axes fold into
// one stride (stride(0) == H * stride(1), as in contiguous memory), else one
// strided-batched call of H per b (permuted views such as q [B, T, H, D] seen
// as [B, H, T, D]). 4-D products take no epilogue.
//
//   matmul(y, x, transpose(w));                                        // y = x w^T, host
//   matmul(y, x, transpose(w), epilogue::gelu_tanh(b, pre), executor);  // Linear + bias + GELU
//   matmul(dh, dy, w2, epilogue::gelu_tanh_backward(pre, db), executor); // its backward, with db
//
// Transposes come from the operands' layouts (row_major, col_major, the views
// transpose() and permute<> make), never from flags: each matrix needs unit
// stride along one of its axes. The precision policies pick how it computes
// (fp32 exact, tf32 tensor cores, bf16/fp16 with fp32 accumulation). Shapes are
// checked before anything runs: static ones at compile time, dynamic ones with
// a shape_error naming all three; c sharing memory with a or b is a fusor::error
// (no product can be written over its own input). Epilogues: kernels/matmul_epilogue.hpp.
// Programs that call matmul link the CMake target fusor::blas.
#pragma once

#include <array>
#include <string>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/strided_views.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/view.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/matmul_epilogue.hpp"
#include "fusor/kernels/matmul_host.hpp"
#include "fusor/kernels/matmul_layout.hpp"
#if FUSOR_HAS_CUDA
#include "fusor/kernels/matmul_cublaslt.hpp"
#endif

namespace fusor {

namespace detail {
template <class T>
auto matmul_operand(const T& x) {
  static_assert(is_view_v<T> || is_tensor_v<T>,
                "fusor: matmul reads and writes memory: its operands must be views or tensors (assign an "
                "expression into a tensor first)");
  if constexpr (is_tensor_v<T>) return x.view();
  else return x;
}

template <class T>
inline constexpr bool is_half_precision_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// The element types BLAS and cuBLASLt multiply, and how they accumulate.
template <class PA, class PB, class PC>
constexpr bool check_matmul_types() {
  using A = storage_t<PA>;
  using B = storage_t<PB>;
  using C = storage_t<PC>;
  using accumulate = accumulate_t<PA>;
  static_assert(std::is_same_v<A, float> || std::is_same_v<A, double> || is_half_precision_v<A>,
                "fusor: matmul multiplies float, double, bfloat16 or float16 matrices");
  static_assert(std::is_same_v<A, B>,
                "fusor: matmul's a and b must store the same element type: convert one first (fusor::assign "
                "fusor::cast<T>(x) into a tensor of the other's type)");
  static_assert(std::is_same_v<C, A> || (std::is_same_v<C, float> && is_half_precision_v<A>),
                "fusor: matmul's c must store a's element type, or float when a and b store bfloat16 or float16");
  static_assert(!std::is_same_v<A, bfloat16> || std::is_same_v<accumulate, float>,
                "fusor: bfloat16 matmuls accumulate in float");
  static_assert(!std::is_same_v<A, float16> || std::is_same_v<accumulate, float> ||
                    (std::is_same_v<accumulate, float16> && std::is_same_v<C, float16>),
                "fusor: float16 matmuls accumulate in float (or in float16 into a float16 c)");
  static_assert(!std::is_same_v<A, float> || std::is_same_v<accumulate, float>, "fusor: float matmuls accumulate in float");
  static_assert(!std::is_same_v<A, double> || std::is_same_v<accumulate, double>,
                "fusor: double matmuls accumulate in double");
  return true;
}
}  // namespace detail

namespace detail {
// ---- 4-D operands: a batch of B x H matrices --------------------------------------
template <class CE, class OE>
constexpr bool static_batch_axes_agree() {
  if constexpr (OE::rank() == 2) return true;
  else return static_equal(OE::static_extent(0), CE::static_extent(0)) && static_equal(OE::static_extent(1), CE::static_extent(1));
}

// c [B, H, M, N] = a [B, H, M, K] (or [M, K]) times b [B, H, K, N] (or [K, N]).
template <class CV, class AV, class BV>
void check_4d_matmul_shapes(const CV& c, const AV& a, const BV& b) {
  const auto fail = [&](const char* what) {
    throw shape_error(std::string("fusor: matmul's ") + what + ": c " + shape_string(c.extents()) + " = a " +
                      shape_string(a.extents()) + " times b " + shape_string(b.extents()));
  };
  constexpr std::size_t ar = AV::rank, br = BV::rank;
  if (a.extent(ar - 1) != b.extent(br - 2)) fail("inner dimensions differ");
  if (c.extent(2) != a.extent(ar - 2) || c.extent(3) != b.extent(br - 1)) fail("shapes do not agree");
  if constexpr (ar == 4)
    if (a.extent(0) != c.extent(0) || a.extent(1) != c.extent(1)) fail("batch axes differ");
  if constexpr (br == 4)
    if (b.extent(0) != c.extent(0) || b.extent(1) != c.extent(1)) fail("batch axes differ");
}

// Whether a 4-D view's two batch axes are one strided batch; a 2-D view always is.
template <class V>
bool batch_axes_fold(const V& v) {
  if constexpr (V::rank == 2) return true;
  else return v.extent(0) == 1 || v.extent(1) == 1 || v.stride(0) == v.extent(1) * v.stride(1);
}

// Extents E from every axis's size (the static ones must agree; they are dropped).
template <class E>
E extents_from(const std::array<index_t, E::rank()>& sizes) {
  ::cuda::std::array<index_t, E::rank_dynamic()> dynamic_sizes{};
  for (std::size_t r = 0, d = 0; r != E::rank(); ++r)
    if (E::static_extent(r) == dynamic) dynamic_sizes[d++] = sizes[r];
  return E(dynamic_sizes);
}
template <class V, class E>
auto strided_3d(typename V::element_type* data, const std::array<index_t, 3>& sizes,
                const std::array<index_t, 3>& strides) {
  using mapping = typename strided::template mapping<E>;
  return view<typename V::precision, E, strided, typename V::space>(
      data, mapping(extents_from<E>(sizes), ::cuda::std::array<index_t, 3>{strides[0], strides[1], strides[2]}));
}

// A 4-D view as 3-D [B * H, M, N] (its batch axes fold), or a 2-D view as it is.
template <class V>
auto fold_batch_axes(const V& v) {
  if constexpr (V::rank == 2) {
    return v;
  } else {
    using E = typename V::extents_type;
    using out_extents = extents<index_t, dynamic, E::static_extent(2), E::static_extent(3)>;
    const index_t batch_stride = v.extent(1) == 1 ? v.stride(0) : v.stride(1);
    return strided_3d<V, out_extents>(v.data(), {v.extent(0) * v.extent(1), v.extent(2), v.extent(3)},
                                      {batch_stride, index_t(v.stride(2)), index_t(v.stride(3))});
  }
}

// Item i of a 4-D view's first axis, [H, M, N]; a 2-D view as it is.
template <class V>
auto outer_item(const V& v, index_t i) {
  if constexpr (V::rank == 2) {
    return v;
  } else {
    using E = typename V::extents_type;
    using out_extents = extents<index_t, E::static_extent(1), E::static_extent(2), E::static_extent(3)>;
    return strided_3d<V, out_extents>(v.data() + i * v.stride(0), {v.extent(1), v.extent(2), v.extent(3)},
                                      {index_t(v.stride(1)), index_t(v.stride(2)), index_t(v.stride(3))});
  }
}
}  // namespace detail

namespace detail {
// c must not share memory with a or b: each element of c reads a whole row of a and column of b, and BLAS
// zeroes c before it reads them, so a product over its own input would be all zeros (or garbage on the GPU).
template <class CV, class OV>
void check_matmul_alias(const CV& c, const OV& operand, const char* name) {
  if (bytes_overlap(c, operand))
    throw error("fusor: matmul's c " + layout_text(c) + " overlaps its operand " + name + " " + layout_text(operand) +
                ": a product cannot be written over its own input; write it into a tensor of its own");
}

// c = a b for matrices and 3-D batches of them: views, checked, then run.
template <class CV, class AV, class BV, class Epilogue, class Executor>
void matmul_matrices(const CV& cv, const AV& av, const BV& bv, const Epilogue& ep, const Executor& executor) {
  static_assert((CV::rank == 2 || CV::rank == 3) && (AV::rank == 2 || AV::rank == 3) && (BV::rank == 2 || BV::rank == 3),
                "fusor: matmul's operands are matrices (2-D) or batches of them (3-D, batch axis first; 4-D [B, H, "
                "., .] with a 4-D c)");
  static_assert(CV::rank == 3 || (AV::rank == 2 && BV::rank == 2),
                "fusor: a batched matmul (3-D a or b) needs a 3-D c");
  static_assert(static_matmul_check<typename CV::extents_type, typename AV::extents_type,
                                    typename BV::extents_type>::value,
                FUSOR_MATMUL_SHAPES_MESSAGE);
  static_assert(check_matmul_types<typename AV::precision, typename BV::precision, typename CV::precision>());
  static_assert(check_epilogue_types<Epilogue, CV>());
  check_matmul_shapes(strides_of(cv), strides_of(av), strides_of(bv), CV::rank == 3, AV::rank == 3, BV::rank == 3);
  check_matmul_alias(cv, av, "a");
  check_matmul_alias(cv, bv, "b");
  run_matmul(executor, cv, av, bv, ep);
}

// c [B, H, M, N] = a b: one strided batch of B * H where the batch axes fold, else B of H.
template <class CV, class AV, class BV, class Executor>
void matmul_4d(const CV& cv, const AV& av, const BV& bv, const Executor& executor) {
  static_assert((AV::rank == 2 || AV::rank == 4) && (BV::rank == 2 || BV::rank == 4),
                "fusor: a 4-D matmul's a and b are 4-D [B, H, ., .] or 2-D (shared by every batch)");
  static_assert(static_batch_axes_agree<typename CV::extents_type, typename AV::extents_type>() &&
                    static_batch_axes_agree<typename CV::extents_type, typename BV::extents_type>(),
                "fusor: a 4-D matmul's batch axes [B, H] differ between c and a or b");
  check_4d_matmul_shapes(cv, av, bv);
  check_matmul_alias(cv, av, "a");
  check_matmul_alias(cv, bv, "b");
  if (batch_axes_fold(cv) && batch_axes_fold(av) && batch_axes_fold(bv)) {
    matmul_matrices(fold_batch_axes(cv), fold_batch_axes(av), fold_batch_axes(bv), epilogue::none{}, executor);
    return;
  }
  for (index_t i = 0; i < cv.extent(0); ++i)
    matmul_matrices(outer_item(cv, i), outer_item(av, i), outer_item(bv, i), epilogue::none{}, executor);
}
}  // namespace detail

/// c = a b, then the epilogue `ep`, for matrices, batches of them (3-D) or 4-D [B, H, M, N] operands (no
/// epilogue); OpenBLAS on the host executor, cuBLASLt on the cuda executor. Throws shape_error when shapes
/// disagree.
template <class C, class A, class B, class Epilogue = epilogue::none, class Executor = host_executor>
  requires detail::matmul_epilogue<Epilogue>
void matmul(const C& c, const A& a, const B& b, const Epilogue& ep = {}, const Executor& executor = {}) {
  const auto cv = detail::matmul_operand(c);
  const auto av = detail::matmul_operand(a);
  const auto bv = detail::matmul_operand(b);
  if constexpr (decltype(cv)::rank == 4) {
    static_assert(std::is_same_v<Epilogue, epilogue::none>,
                  "fusor: a 4-D matmul takes no epilogue (view it as 3-D [B * H, M, N] for one)");
    detail::matmul_4d(cv, av, bv, executor);
  } else {
    // matmul_matrices' shape and type checks, here, where the caller's line is; after a failed one,
    // nothing deeper is instantiated.
    using CV = std::remove_const_t<decltype(cv)>;
    using AV = std::remove_const_t<decltype(av)>;
    using BV = std::remove_const_t<decltype(bv)>;
    constexpr bool matrices = (CV::rank == 2 || CV::rank == 3) && (AV::rank == 2 || AV::rank == 3) &&
                              (BV::rank == 2 || BV::rank == 3);
    if constexpr (matrices) {
      static_assert(detail::static_matmul_check<typename CV::extents_type, typename AV::extents_type,
                                                typename BV::extents_type>::value,
                    FUSOR_MATMUL_SHAPES_MESSAGE);
      static_assert(detail::check_matmul_types<typename AV::precision, typename BV::precision,
                                               typename CV::precision>());
      if constexpr (detail::static_matmul_check<typename CV::extents_type, typename AV::extents_type,
                                                typename BV::extents_type>::value)
        detail::matmul_matrices(cv, av, bv, ep, executor);
    } else {
      detail::matmul_matrices(cv, av, bv, ep, executor);  // its static_assert names the ranks it takes
    }
  }
}

/// c = a b on `executor`, without an epilogue.
template <class C, class A, class B, class Executor>
  requires(!detail::matmul_epilogue<Executor>)
void matmul(const C& c, const A& a, const B& b, const Executor& executor) {
  matmul(c, a, b, epilogue::none{}, executor);
}

}  // namespace fusor
