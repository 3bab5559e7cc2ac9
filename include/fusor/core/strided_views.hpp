// fusor/core/strided_views.hpp — views onto the same memory in another order:
// transpose, permute and slice. Each returns a layout_stride view; no data moves.
#pragma once

#include <cstddef>
#include <string>

#include <cuda/std/array>
#include <cuda/std/mdspan>
#include <cuda/std/utility>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/view.hpp"

namespace fusor {

namespace detail {
template <class E, std::size_t... Perm>
using permuted_extents_t = ::cuda::std::extents<typename E::index_type, E::static_extent(Perm)...>;

template <class P, class E, class S>
using strided_view_t = view<P, E, strided, S>;

template <std::size_t... Perm>
constexpr bool is_permutation() {
  constexpr std::size_t n = sizeof...(Perm);
  constexpr std::size_t p[] = {Perm...};
  for (std::size_t i = 0; i < n; ++i) {
    bool found = false;
    for (std::size_t j = 0; j < n; ++j) found = found || p[j] == i;
    if (!found) return false;
  }
  return true;
}
}  // namespace detail

/// Axis k of the result is axis Perm[k] of the input.
template <std::size_t... Perm, class P, class E, class L, class S>
auto permute(const view<P, E, L, S>& v) {
  static_assert(sizeof...(Perm) == E::rank(), "fusor: permute needs one axis index per axis");
  static_assert(detail::is_permutation<Perm...>(), "fusor: permute's axes must be a permutation of 0..rank-1");
  using out_extents = detail::permuted_extents_t<E, Perm...>;
  using mapping = typename strided::template mapping<out_extents>;
  const out_extents e(static_cast<typename E::index_type>(v.extent(Perm))...);
  const ::cuda::std::array<typename E::index_type, E::rank()> strides{
      static_cast<typename E::index_type>(v.stride(Perm))...};
  return detail::strided_view_t<P, out_extents, S>(v.data(), mapping(e, strides));
}

/// The matrix transpose of a 2-D view.
template <class P, class E, class L, class S>
auto transpose(const view<P, E, L, S>& v) {
  static_assert(E::rank() == 2, "fusor: transpose is for 2-D views; use permute<...> for more axes");
  return permute<1, 0>(v);
}

namespace detail {
template <class E, std::size_t Axis, class Seq = ::cuda::std::make_index_sequence<E::rank()>>
struct sliced_extents;
template <class E, std::size_t Axis, std::size_t... R>
struct sliced_extents<E, Axis, ::cuda::std::index_sequence<R...>> {
  using type = ::cuda::std::extents<typename E::index_type, (R == Axis ? dynamic : E::static_extent(R))...>;
};
}  // namespace detail

/// Elements [begin, end) along Axis; the other axes whole.
template <std::size_t Axis, class P, class E, class L, class S>
auto slice(const view<P, E, L, S>& v, index_t begin, index_t end) {
  static_assert(Axis < E::rank(), "fusor: slice axis out of range");
  if (begin < 0 || end < begin || end > v.extent(Axis))
    throw shape_error("fusor: slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of axis " +
                      std::to_string(Axis) + " is outside shape " + shape_string(v.extents()));
  using out_extents = typename detail::sliced_extents<E, Axis>::type;
  using index_type = typename E::index_type;
  ::cuda::std::array<index_type, E::rank()> sizes{}, strides{};
  for (std::size_t r = 0; r != E::rank(); ++r) {
    sizes[r] = static_cast<index_type>(r == Axis ? end - begin : v.extent(r));
    strides[r] = static_cast<index_type>(v.stride(r));
  }
  ::cuda::std::array<index_type, out_extents::rank_dynamic()> dynamic_sizes{};
  for (std::size_t r = 0, d = 0; r != E::rank(); ++r)
    if (out_extents::static_extent(r) == dynamic) dynamic_sizes[d++] = sizes[r];
  using mapping = typename strided::template mapping<out_extents>;
  const index_t start = begin * v.stride(Axis);
  return detail::strided_view_t<P, out_extents, S>(v.data() + (v.extent(Axis) ? start : 0),
                                                   mapping(out_extents(dynamic_sizes), strides));
}

// Of a tensor: of its view. The tensor must outlive the result, so a temporary tensor is refused.
template <class Precision, class Extents, class Layout, class Space>
class tensor;
namespace detail {
template <class T>
inline constexpr bool temporary_tensor_view = false;  // false for every T: a static_assert that names the mistake
}  // namespace detail
#define FUSOR_TEMPORARY_TENSOR_VIEW_MESSAGE                                                                  \
  "fusor: a strided view (transpose, permute, slice) of a temporary tensor would outlive its memory; keep the " \
  "tensor in a variable"

/// transpose(t.view()): the tensor must outlive the result.
template <class P, class E, class L, class S>
auto transpose(const tensor<P, E, L, S>& t) {
  return transpose(t.view());
}
/// Of a temporary tensor: does not compile (the view would outlive its memory).
template <class P, class E, class L, class S>
auto transpose(tensor<P, E, L, S>&& t) {
  static_assert(detail::temporary_tensor_view<E>, FUSOR_TEMPORARY_TENSOR_VIEW_MESSAGE);
  return transpose(t.view());  // never compiled: the type, so that no second error follows
}
/// permute<Perm...>(t.view()): the tensor must outlive the result.
template <std::size_t... Perm, class P, class E, class L, class S>
auto permute(const tensor<P, E, L, S>& t) {
  return permute<Perm...>(t.view());
}
/// Of a temporary tensor: does not compile (the view would outlive its memory).
template <std::size_t... Perm, class P, class E, class L, class S>
auto permute(tensor<P, E, L, S>&& t) {
  static_assert(detail::temporary_tensor_view<E>, FUSOR_TEMPORARY_TENSOR_VIEW_MESSAGE);
  return permute<Perm...>(t.view());  // never compiled: the type, so that no second error follows
}
/// slice<Axis>(t.view(), begin, end): the tensor must outlive the result.
template <std::size_t Axis, class P, class E, class L, class S>
auto slice(const tensor<P, E, L, S>& t, index_t begin, index_t end) {
  return slice<Axis>(t.view(), begin, end);
}
/// Of a temporary tensor: does not compile (the view would outlive its memory).
template <std::size_t Axis, class P, class E, class L, class S>
auto slice(tensor<P, E, L, S>&& t, index_t begin, index_t end) {
  static_assert(detail::temporary_tensor_view<E>, FUSOR_TEMPORARY_TENSOR_VIEW_MESSAGE);
  return slice<Axis>(t.view(), begin, end);  // never compiled: the type, so that no second error follows
}

}  // namespace fusor
