// fusor/kernels/reduce.hpp — reductions of any tensor or fused expression,
// over the whole of it or along one axis, under the host or the CUDA executor:
//
//   sum  mean  amax  amin  argmax  argmin  sum_of_squares  norm (L2)
//
// (amax/amin, as in PyTorch and NumPy: `max(a, b)` is the elementwise maximum.)
// The destination's shape says what is reduced:
//
//   fusor::sum(out, x * y + 1, ex);      // out has one element (rank 0 or all extents 1)
//   fusor::sum(out, x, 1, ex);           // along axis 1 (negative counts from the end):
//                                        //   out [rows, 1] keeps the axis, out [rows] drops it
//   float s = fusor::sum(x * y + 1, ex); // the value, on the host: waits for the stream
//
// The input is never materialised: its leaves are read in place, in the memory
// order of its first full-shape leaf (host: one OpenMP loop; CUDA: fusor's
// kernels, reduce_kernels.hpp). Values accumulate in
// the input's accumulate type (fp32 for bf16/fp16; the widest leaf's for an
// expression), then are converted into the destination's element.
//
// Semantics. A NaN makes sum, mean, norm, amax and amin NaN. argmax/argmin
// write an integer destination: the index along the axis, or over the whole
// tensor the linear index in logical row-major order; ties give the first
// index; NaN counts as the maximum (argmax) and the minimum (argmin), so the
// first NaN wins, as in PyTorch. Zero elements: sum, sum_of_squares and norm
// give 0, mean NaN; amax, amin, argmax and argmin throw shape_error.
// Results are deterministic for the same inputs, executor and device (on the
// host, whatever the OpenMP thread count). Host and CUDA sums add in different
// orders (reduce_host.hpp, reduce_cuda.hpp), so they agree within rounding,
// not bit for bit; max/min/arg kinds agree exactly on the same element values
// (an expression's elements may differ in the last bit: nvcc contracts a * b + c
// to one fma). The destination must not overlap the input.
#pragma once

#include <concepts>
#include <string>
#include <type_traits>
#include <utility>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/exec/pass.hpp"
#include "fusor/kernels/reduce_cuda.hpp"
#include "fusor/kernels/reduce_host.hpp"
#include "fusor/kernels/reduce_kernels.hpp"
#include "fusor/kernels/reduce_ops.hpp"

namespace fusor {

/// Names both static shapes in the compiler's message when no axis of a reduction's input reduces to its
/// destination's static shape: `static_assert(reduction_shapes_must_fit<...>::value, "fusor: ...")`.
template <class DestinationShape, class InputShape, bool SomeAxisFits>
struct reduction_shapes_must_fit {
  static constexpr bool value = SomeAxisFits;  ///< Whether some axis of the input gives the destination's shape.
};

/// The executors a reduction runs under.
template <class T>
concept reduction_executor = std::same_as<T, host_executor>
#if FUSOR_HAS_CUDA
                             || std::same_as<T, cuda_executor>
#endif
    ;

// The dispatch below checks shapes and types and runs the host executor's
// loops itself; any other executor's work goes to overloads of
// reduce_whole_on, reduce_axis_on and reduce_value_on for its type:
// reduce_cuda.hpp's for the cuda executor, and the host tests' for an
// executor that runs the CUDA kernels' bodies under the SIMT emulator (found
// by argument-dependent lookup in its namespace).
namespace detail {
template <class T>
concept reduction_destination = is_tensor_v<std::remove_cvref_t<T>> || assignable<std::remove_cvref_t<T>>;

template <reduction_kind Kind, class E>
using reduction_for = reduction<Kind, widened_accumulate_t<Kind, accumulate_of_t<E>>>;

// D: the destination's type, or void for a value returned to the host.
template <reduction_kind Kind, class Executor, class D, class E>
constexpr void check_types() {
  static_assert(!has_placeholder_v<E>,
                "fusor: this expression still has placeholders (arg<N>); substitute() operands for them first");
  using destination = std::conditional_t<std::is_void_v<D>, literal<int>, D>;
  static_assert(Executor::template can_run<target<destination, E>>,
                "fusor: an operand of this reduction lives in a memory space its executor cannot read or write "
                "(host memory on the cuda executor, or device memory on the host executor)");
  if constexpr (is_arg(Kind) && !std::is_void_v<D>)
    static_assert(std::is_integral_v<typename D::element_type>,
                  "fusor: argmax and argmin write indices: their destination must hold an integer type");
}

template <class D>
constexpr bool static_single_element() {
  for (std::size_t k = 0; k != D::extents_type::rank(); ++k)
    if (D::extents_type::static_extent(k) != dynamic && D::extents_type::static_extent(k) != 1) return false;
  return true;
}

// Whether reducing static-extent input E along some axis can give destination D (dynamic extents fit anything); true
// where the ranks rule every axis out, which reduce_axis's rank check reports instead.
template <class D, class E>
constexpr bool some_axis_fits() {
  constexpr int R = int(E::rank()), DR = int(D::rank());
  if (R == 0 || (DR != R && DR + 1 != R)) return true;
  const auto same = [](std::size_t a, std::size_t b) { return a == dynamic || b == dynamic || a == b; };
  for (int a = 0; a != R; ++a) {
    bool fits = true;
    for (int k = 0, j = 0; k != R; ++k) {
      if (DR == R) fits = fits && same(D::static_extent(k), k == a ? 1 : E::static_extent(k));
      else if (k != a) fits = fits && same(D::static_extent(j++), E::static_extent(k));
    }
    if (fits) return true;
  }
  return false;
}
template <class D, class E>
using reduction_fit_check = reduction_shapes_must_fit<shape_of_t<D>, shape_of_t<E>, some_axis_fits<D, E>()>;

template <reduction_kind Kind, class In, class E>
void check_has_elements(const In& in, const E& e) {
  if (needs_elements(Kind) && in.length == 0 && in.outputs > 0)
    throw shape_error(std::string("fusor: ") + kind_name(Kind) + " of a tensor of shape " +
                      shape_string(e.extents()) +
                      (in.axis < 0 ? std::string() : " along axis " + std::to_string(in.axis)) +
                      " has no elements to reduce");
}

// Reduces everything into the one element of dst.
template <reduction_kind Kind, class Executor, class D, class E>
void reduce_whole_into(const D& dst, const E& e, const Executor& executor) {
  const auto in = make_reduction_input(e, -1);
  check_has_elements<Kind>(in, e);
  const reduction_for<Kind, E> red{};
  if constexpr (std::is_same_v<Executor, host_executor>) {
    const auto total = host_reduce_whole(red, in, executor);
    store_output(dst, ::cuda::std::array<index_t, E::extents_type::rank()>{}, -1, red.finish(total, in.size));
  } else {
    reduce_whole_on(red, in, view_sink<D>{dst}, executor);
  }
}

template <reduction_kind Kind, class Executor, class D, class E>
void reduce_whole(const D& dst, const E& e, const Executor& executor) {
  check_types<Kind, Executor, D, E>();
  static_assert(static_single_element<D>(),
                "fusor: a reduction of a whole tensor writes one element: its destination must have rank 0 or "
                "every extent 1 (to reduce along one axis, pass the axis)");
  if (dst.size() != 1)
    throw shape_error(std::string("fusor: ") + kind_name(Kind) + " of a tensor of shape " +
                      shape_string(e.extents()) + " writes one element, but the destination has shape " +
                      shape_string(dst.extents()) + " (rank 0 or every extent 1 expected; or pass an axis)");
  reduce_whole_into<Kind>(dst, e, executor);
}

template <reduction_kind Kind, class Executor, class D, class E>
void reduce_axis(const D& dst, const E& e, int axis, const Executor& executor) {
  check_types<Kind, Executor, D, E>();
  constexpr int R = int(E::extents_type::rank());
  static_assert(int(D::rank) == R || int(D::rank) + 1 == R,
                "fusor: a reduction along an axis writes a destination of the input's rank (the axis kept, "
                "extent 1) or of one less (the axis dropped)");
  static_assert(reduction_fit_check<typename D::extents_type, typename E::extents_type>::value,
                "fusor: no axis of this reduction's input gives the destination's static shape (the input's shape "
                "with the axis dropped, or kept as 1): fix the destination's extents; both shapes are named in "
                "reduction_shapes_must_fit<shape<destination>, shape<input>> (-1 is a dynamic extent)");
  const auto fail = [&](const std::string& why) {
    throw shape_error(std::string("fusor: ") + kind_name(Kind) + " along axis " + std::to_string(axis) +
                      " of a tensor of shape " + shape_string(e.extents()) + " into a destination of shape " +
                      shape_string(dst.extents()) + ": " + why);
  };
  if (axis < -R || axis >= R) fail("the axis is out of range");
  const int a = axis < 0 ? axis + R : axis;
  bool fits = true;
  std::string kept = "[", dropped = "[";
  for (int k = 0, j = 0; k != R; ++k) {
    const index_t extent = index_t(e.extents().extent(k));
    kept += (k ? ", " : "") + std::to_string(k == a ? 1 : extent);
    if constexpr (int(D::rank) == R) {
      fits = fits && index_t(dst.extent(k)) == (k == a ? 1 : extent);
    } else if (k != a) {
      dropped += (j ? ", " : "") + std::to_string(extent);
      fits = fits && index_t(dst.extent(j++)) == extent;
    }
  }
  if (!fits) {
    if constexpr (int(D::rank) == R) fail("keeping the axis needs shape " + kept + "]");
    else fail("dropping the axis needs shape " + dropped + "]");
  }
  const auto in = make_reduction_input(e, a);
  check_has_elements<Kind>(in, e);
  if (in.outputs == 0) return;
  if (in.outputs == 1) return reduce_whole_into<Kind>(dst, e, executor);  // every other extent is 1
  const reduction_for<Kind, E> red{};
  if constexpr (std::is_same_v<Executor, host_executor>) {
    host_reduce_axis(red, in, dst, executor);
  } else {
    reduce_axis_on(red, in, dst, executor);
  }
}

// The result on the host. Under the cuda executor this waits for the stream.
template <reduction_kind Kind, class Executor, class E>
auto reduce_value(const E& e, const Executor& executor) {
  check_types<Kind, Executor, void, E>();
  using red_type = reduction_for<Kind, E>;
  const auto in = make_reduction_input(e, -1);
  check_has_elements<Kind>(in, e);
  const red_type red{};
  if constexpr (std::is_same_v<Executor, host_executor>) {
    return red.finish(host_reduce_whole(red, in, executor), in.size);
  } else {
    return reduce_value_on(red, in, executor);
  }
}
}  // namespace detail

// Three forms each: into a one-element destination, along an axis into a
// destination with the axis kept or dropped, and as a value on the host (the
// accumulate type; mean and norm of integers give double; argmax/argmin index_t).
#define FUSOR_REDUCTION(name, kind)                                                                       \
  template <class Out, class In, reduction_executor Executor = host_executor>                            \
    requires detail::reduction_destination<Out> && tree_operand<In>                                      \
  void name(Out&& out, In&& in, const Executor& executor = {}) {                                         \
    detail::reduce_whole<kind>(as_expression(std::forward<Out>(out)), as_expression(std::forward<In>(in)), \
                               executor);                                                                 \
  }                                                                                                       \
  template <class Out, class In, reduction_executor Executor = host_executor>                            \
    requires detail::reduction_destination<Out> && tree_operand<In>                                      \
  void name(Out&& out, In&& in, int axis, const Executor& executor = {}) {                               \
    detail::reduce_axis<kind>(as_expression(std::forward<Out>(out)), as_expression(std::forward<In>(in)),  \
                              axis, executor);                                                            \
  }                                                                                                       \
  template <class In, reduction_executor Executor = host_executor>                                       \
    requires tree_operand<In>                                                                             \
  auto name(In&& in, const Executor& executor = {}) {                                                    \
    return detail::reduce_value<kind>(as_expression(std::forward<In>(in)), executor);                    \
  }

// Doxygen does not expand these macros: the cond section keeps their invocations out of the API reference.
/// \cond
FUSOR_REDUCTION(sum, reduction_kind::sum)
FUSOR_REDUCTION(mean, reduction_kind::mean)
FUSOR_REDUCTION(amax, reduction_kind::max)
FUSOR_REDUCTION(amin, reduction_kind::min)
FUSOR_REDUCTION(argmax, reduction_kind::argmax)
FUSOR_REDUCTION(argmin, reduction_kind::argmin)
FUSOR_REDUCTION(sum_of_squares, reduction_kind::sum_of_squares)
FUSOR_REDUCTION(norm, reduction_kind::norm)
/// \endcond
#undef FUSOR_REDUCTION

}  // namespace fusor
