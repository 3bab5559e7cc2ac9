// fusor/core/extents.hpp — shapes: static and dynamic extents mixed freely
// (::cuda::std::extents), numpy-style broadcasting of two shapes, and the
// compile-time and run-time checks that name both shapes when they disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <cuda/std/array>
#include <cuda/std/mdspan>
#include <cuda/std/utility>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"

namespace fusor {

using index_t = std::int64_t;  ///< The signed 64-bit type of indices, extents and strides.
inline constexpr std::size_t dynamic = ::cuda::std::dynamic_extent;  ///< An extent given at run time.

/// A shape: static extents and `dynamic` ones mixed freely (`cuda::std::extents`).
template <class IndexType, std::size_t... Extents>
using extents = ::cuda::std::extents<IndexType, Extents...>;
/// A shape of `Rank` axes, all dynamic.
template <class IndexType, std::size_t Rank>
using dextents = ::cuda::std::dextents<IndexType, Rank>;

/// Whether `E` is an extents type.
template <class E>
inline constexpr bool is_extents_v = false;
/// True for every extents type.
template <class I, std::size_t... Es>
inline constexpr bool is_extents_v<::cuda::std::extents<I, Es...>> = true;

/// A shape as it appears in compile-time error messages: -1 is a dynamic extent.
template <long long... Extents>
struct shape {};

namespace detail {
template <class E, class Seq = ::cuda::std::make_index_sequence<E::rank()>>
struct shape_of;
template <class E, std::size_t... R>
struct shape_of<E, ::cuda::std::index_sequence<R...>> {
  using type = shape<(E::static_extent(R) == dynamic ? -1LL : (long long)E::static_extent(R))...>;
};
}  // namespace detail
/// The shape<...> naming E's static extents (-1 for dynamic ones), for compile-time messages.
template <class E>
using shape_of_t = typename detail::shape_of<E>::type;

namespace detail {
// "[3, 784]" from `rank` extents: shape_string's body, one function for every shape type.
FUSOR_DECL std::string extents_text(const index_t* extents, std::size_t rank);
// make_pass()'s shape_error: two destinations of one assignment, of shapes `a` and `b`.
[[noreturn]] FUSOR_DECL void throw_destinations_differ(const std::string& a, const std::string& b);
// check_fits()'s shape_error: an expression of shape `expression` cannot be assigned to `destination`.
[[noreturn]] FUSOR_DECL void throw_does_not_fit(const std::string& expression, const std::string& destination);
// broadcast()'s shape_error: shapes `a` and `b` differ on `axis` (extents `ea` and `eb`).
[[noreturn]] FUSOR_DECL void throw_no_broadcast(const std::string& a, const std::string& b, std::size_t axis, index_t ea,
                                               index_t eb);
}  // namespace detail

/// "[3, 784]": for run-time error messages.
template <class E>
std::string shape_string(const E& e) {
  index_t x[E::rank() > 0 ? E::rank() : 1] = {};
  for (std::size_t r = 0; r != E::rank(); ++r) x[r] = static_cast<index_t>(e.extent(r));
  return detail::extents_text(x, E::rank());
}

/// The number of elements of shape `e`: the product of its extents (1 at rank 0).
template <class E>
FUSOR_HOST_DEVICE constexpr index_t element_count(const E& e) {
  index_t n = 1;
  for (std::size_t r = 0; r != E::rank(); ++r) n *= static_cast<index_t>(e.extent(r));
  return n;
}

// ---- broadcasting ---------------------------------------------------------------
namespace detail {
// Extent of axis R (counted from the right) of E, or 1 where E has no such axis.
template <class E>
constexpr std::size_t static_extent_from_right(std::size_t r_from_right) {
  if (r_from_right + 1 > E::rank()) return 1;
  return E::static_extent(E::rank() - 1 - r_from_right);
}
constexpr bool static_axes_broadcast(std::size_t a, std::size_t b) {
  return a == dynamic || b == dynamic || a == b || a == 1 || b == 1;
}
constexpr std::size_t broadcast_static_axis(std::size_t a, std::size_t b) {
  if (a == dynamic && b == dynamic) return dynamic;
  if (a == dynamic) return b == 1 ? dynamic : b;
  if (b == dynamic) return a == 1 ? dynamic : a;
  return a == 1 ? b : a;
}
template <class A, class B>
constexpr bool static_shapes_broadcast() {
  constexpr std::size_t rank = A::rank() > B::rank() ? A::rank() : B::rank();
  for (std::size_t r = 0; r != rank; ++r)
    if (!static_axes_broadcast(static_extent_from_right<A>(r), static_extent_from_right<B>(r))) return false;
  return true;
}
template <class A, class B, class Seq>
struct broadcast_extents;
template <class A, class B, std::size_t... R>
struct broadcast_extents<A, B, ::cuda::std::index_sequence<R...>> {
  static constexpr std::size_t rank = sizeof...(R);
  using type = ::cuda::std::extents<index_t, broadcast_static_axis(
                                               static_extent_from_right<A>(rank - 1 - R),
                                               static_extent_from_right<B>(rank - 1 - R))...>;
};
}  // namespace detail

/// Names both static shapes in the compiler's message: fusor checks broadcasting with
/// `static_assert(static_shapes_must_broadcast<...>::value, "fusor: ...")`, so the failing
/// condition shows the shapes and the message says what to do.
template <class LeftShape, class RightShape, bool Broadcast>
struct static_shapes_must_broadcast {
  static constexpr bool value = Broadcast;  ///< Whether the shapes broadcast.
};
/// Like static_shapes_must_broadcast, for an expression's static shape that must fit its destination's.
template <class DestinationShape, class ExpressionShape, bool Fits>
struct static_shapes_must_match {
  static constexpr bool value = Fits;  ///< Whether the expression's shape fits the destination's.
};

/// The static shape of the broadcast of shapes A and B, axes aligned from the right.
template <class A, class B>
using broadcast_extents_t = typename detail::broadcast_extents<
    A, B, ::cuda::std::make_index_sequence<(A::rank() > B::rank() ? A::rank() : B::rank())>>::type;

/// static_shapes_must_broadcast for extents A and B: its value says whether their static extents broadcast.
template <class A, class B>
using static_broadcast_check =
    static_shapes_must_broadcast<shape_of_t<A>, shape_of_t<B>, detail::static_shapes_broadcast<A, B>()>;

namespace detail {
template <class... E>
struct first_static_broadcast_failure;
template <class E>
struct first_static_broadcast_failure<E> {
  using type = static_shapes_must_broadcast<shape_of_t<E>, shape_of_t<E>, true>;
};
template <class A, class B, class... Rest>
struct first_static_broadcast_failure<A, B, Rest...> {
  using type = std::conditional_t<static_broadcast_check<A, B>::value,
                                  typename first_static_broadcast_failure<broadcast_extents_t<A, B>, Rest...>::type,
                                  static_broadcast_check<A, B>>;
};
}  // namespace detail

/// Broadcasting extents E... left to right (as an expression node does): the static_shapes_must_broadcast of the
/// first pair whose static extents do not broadcast, or one whose value is true.
template <class... E>
using static_broadcast_check_all = typename detail::first_static_broadcast_failure<E...>::type;

/// The message of a failed static_broadcast_check (one string literal, for static_assert).
#define FUSOR_STATIC_BROADCAST_MESSAGE                                                                            \
  "fusor: the static shapes of two operands do not broadcast (axes aligned from the right must be equal or 1): " \
  "fix the extents of one of them; both shapes are named in static_shapes_must_broadcast<shape<...>, shape<...>> " \
  "(-1 is a dynamic extent)"
/// The message of a failed static_fit_check (one string literal, for static_assert).
#define FUSOR_STATIC_FIT_MESSAGE                                                                                  \
  "fusor: the expression's static shape does not match the destination's (axes aligned from the right must be " \
  "equal, or 1 in the expression): fix the destination's extents or the expression's; both shapes are named in " \
  "static_shapes_must_match<shape<destination>, shape<expression>> (-1 is a dynamic extent)"

/// The broadcast of two run-time shapes; throws shape_error naming both.
template <class A, class B>
broadcast_extents_t<A, B> broadcast(const A& a, const B& b) {
  static_assert(static_broadcast_check<A, B>::value, FUSOR_STATIC_BROADCAST_MESSAGE);
  using R = broadcast_extents_t<A, B>;
  ::cuda::std::array<index_t, R::rank()> out{};
  for (std::size_t r = 0; r != R::rank(); ++r) {
    const std::size_t from_right = R::rank() - 1 - r;
    const index_t ea = from_right + 1 <= A::rank() ? static_cast<index_t>(a.extent(A::rank() - 1 - from_right)) : 1;
    const index_t eb = from_right + 1 <= B::rank() ? static_cast<index_t>(b.extent(B::rank() - 1 - from_right)) : 1;
    if (ea != eb && ea != 1 && eb != 1) detail::throw_no_broadcast(shape_string(a), shape_string(b), r, ea, eb);
    out[r] = ea == 1 ? eb : ea;
  }
  return R(out);
}

namespace detail {
// idx[axis] = v for a run-time axis, by a select per axis: an array written at
// a run-time index lives in local memory on the GPU (the multi-indices of
// strided passes and reductions).
template <std::size_t R>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void set_axis(::cuda::std::array<index_t, R>& idx, int axis, index_t v) {
  FUSOR_UNROLL
  for (std::size_t a = 0; a != R; ++a)
    if (int(a) == axis) idx[a] = v;
}
}  // namespace detail

// Whether an expression of shape `e` fits a destination of shape `d`: the same
// rank or fewer, and every axis equal or 1. Static parts are checked at compile time.
namespace detail {
template <class D, class E>
constexpr bool static_fits() {
  if (E::rank() > D::rank()) return false;
  for (std::size_t r = 0; r != E::rank(); ++r) {
    const std::size_t d = static_extent_from_right<D>(r), e = static_extent_from_right<E>(r);
    if (d != dynamic && e != dynamic && d != e && e != 1) return false;
  }
  return true;
}
}  // namespace detail

/// static_shapes_must_match for destination extents D and expression extents E: its value says whether E's static
/// extents fit D's.
template <class D, class E>
using static_fit_check = static_shapes_must_match<shape_of_t<D>, shape_of_t<E>, detail::static_fits<D, E>()>;

/// Throws shape_error unless an expression of shape `e` fits a destination of shape `d`: the same rank or
/// fewer, and every axis equal or 1. Static parts are checked at compile time.
template <class D, class E>
void check_fits(const D& d, const E& e) {
  static_assert(static_fit_check<D, E>::value, FUSOR_STATIC_FIT_MESSAGE);
  for (std::size_t r = 0; r != E::rank(); ++r) {
    const index_t de = d.extent(D::rank() - 1 - r), ee = e.extent(E::rank() - 1 - r);
    if (de != ee && ee != 1) detail::throw_does_not_fit(shape_string(e), shape_string(d));
  }
}

}  // namespace fusor

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/core/impl/extents.ipp"
#endif
