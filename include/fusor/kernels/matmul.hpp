// fusor/kernels/matmul.hpp — matrix products: matmul(c, a, b [, epilogue] [, executor])
// computes c = a b (c[i, j] = sum_k a[i, k] b[k, j]) for matrices (2-D views or
// tensors) and batches of them (3-D, leading batch axis, any batch stride; a
// 2-D operand is shared by every batch). OpenBLAS runs it under the host
// executor, cuBLASLt under the CUDA executor (one call, the epilogue fused).
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
// a shape_error naming all three. Epilogues: kernels/matmul_epilogue.hpp.
// Programs that call matmul link the CMake target fusor::blas.
#pragma once

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
  static_assert(std::is_same_v<A, B>, "fusor: matmul's a and b must store the same element type");
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

template <class C, class A, class B, class Epilogue = epilogue::none, class Executor = host_executor>
  requires detail::matmul_epilogue<Epilogue>
void matmul(const C& c, const A& a, const B& b, const Epilogue& ep = {}, const Executor& executor = {}) {
  const auto cv = detail::matmul_operand(c);
  const auto av = detail::matmul_operand(a);
  const auto bv = detail::matmul_operand(b);
  using CV = decltype(cv);
  using AV = decltype(av);
  using BV = decltype(bv);
  static_assert((CV::rank == 2 || CV::rank == 3) && (AV::rank == 2 || AV::rank == 3) && (BV::rank == 2 || BV::rank == 3),
                "fusor: matmul's operands are matrices (2-D) or batches of them (3-D, batch axis first)");
  static_assert(CV::rank == 3 || (AV::rank == 2 && BV::rank == 2),
                "fusor: a batched matmul (3-D a or b) needs a 3-D c");
  static_assert(detail::check_static_matmul_shapes<typename CV::extents_type, typename AV::extents_type,
                                                   typename BV::extents_type>());
  static_assert(detail::check_matmul_types<typename AV::precision, typename BV::precision, typename CV::precision>());
  static_assert(detail::check_epilogue_types<Epilogue, CV>());
  detail::check_matmul_shapes(detail::strides_of(cv), detail::strides_of(av), detail::strides_of(bv), CV::rank == 3,
                              AV::rank == 3, BV::rank == 3);
  detail::run_matmul(executor, cv, av, bv, ep);
}

template <class C, class A, class B, class Executor>
  requires(!detail::matmul_epilogue<Executor>)
void matmul(const C& c, const A& a, const B& b, const Executor& executor) {
  matmul(c, a, b, epilogue::none{}, executor);
}

}  // namespace fusor
