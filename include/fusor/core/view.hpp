// fusor/core/view.hpp — fusor::view, the non-owning, trivially copyable window
// onto memory that kernels receive: a ::cuda::std::mdspan plus the precision and
// memory space in its type.
//
// A view is also the leaf of every expression: it reads its elements converted
// to the precision's compute type, by multi-index (any layout, broadcasting
// size-1 and missing leading axes) or, on the fast path, V consecutive elements
// at a linear position.
#pragma once

#include <cstdint>
#include <cstddef>

#include <cuda/std/array>
#include <cuda/std/mdspan>
#include <cuda/std/type_traits>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/layout.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/vector_access.hpp"

namespace fusor {

/// Extents and strides of a destination, in its own rank: what an operand must
/// match to be read at the destination's linear positions.
template <std::size_t Rank>
struct dense_shape {
  ::cuda::std::array<index_t, Rank> extent{};  ///< Extent of each axis.
  ::cuda::std::array<index_t, Rank> stride{};  ///< Stride of each axis, in elements.
};

/// A non-owning, trivially copyable window of shape `Extents` and layout `Layout` onto memory in `Space`,
/// holding elements of `Precision`; what kernels receive, and the leaf of every expression.
///
/// As an expression it reads its elements converted to the compute type, broadcasting size-1 and missing
/// leading axes.
template <class Precision, class Extents, class Layout = row_major, class Space = host_space>
class view {
 public:
  using precision = Precision;  ///< The precision argument: an element type or a policy.
  using element_type = storage_t<Precision>;  ///< The element type kept in memory.
  using value_type = compute_t<Precision>;  ///< The type elements are read as, in expressions.
  using extents_type = Extents;  ///< The shape type.
  using layout_type = Layout;  ///< The layout policy.
  using space = Space;  ///< The memory space.
  using mdspan_type = ::cuda::std::mdspan<element_type, Extents, Layout>;  ///< The mdspan it wraps.
  using mapping_type = typename mdspan_type::mapping_type;  ///< The layout mapping of its extents.
  using index_type = typename Extents::index_type;  ///< The index type of its extents.
  static constexpr std::size_t rank = Extents::rank();  ///< The number of axes.
  static constexpr bool weak = false;  ///< A literal scalar is weak; a view never is.
  /// Bytes of its element type: the narrowest element limits the vector width of an assignment.
  static constexpr std::size_t narrowest_element = sizeof(element_type);

  static_assert(is_extents_v<Extents>, "fusor: a view's second argument must be fusor::extents<...>");
  static_assert(memory_space<Space>, "fusor: a view's fourth argument must be a memory space");

  /// An empty view (null data); mdspan alone has no default for all-static extents.
  FUSOR_HOST_DEVICE view() : span_(static_cast<element_type*>(nullptr), mapping_type()) {}
  /// A view of the memory at `data`, laid out by `map`.
  FUSOR_HOST_DEVICE view(element_type* data, const mapping_type& map) : span_(data, map) {}
  /// A view of what `span` addresses.
  FUSOR_HOST_DEVICE explicit view(mdspan_type span) : span_(span) {}
  /// A view of the memory at `data` with the given dynamic extents, in order.
  template <class... Sizes>
    requires(sizeof...(Sizes) == Extents::rank_dynamic() && (::cuda::std::is_convertible_v<Sizes, index_type> && ...))
  FUSOR_HOST_DEVICE view(element_type* data, Sizes... dynamic_sizes) : span_(data, Extents(dynamic_sizes...)) {}

  /// The memory the view starts at (element offset 0).
  FUSOR_HOST_DEVICE element_type* data() const { return span_.data_handle(); }
  /// The underlying mdspan.
  FUSOR_HOST_DEVICE const mdspan_type& mdspan() const { return span_; }
  /// The layout mapping.
  FUSOR_HOST_DEVICE const mapping_type& mapping() const { return span_.mapping(); }
  /// The shape.
  FUSOR_HOST_DEVICE const Extents& extents() const { return span_.extents(); }
  /// The extent of axis `r`.
  FUSOR_HOST_DEVICE index_t extent(std::size_t r) const { return span_.extent(r); }
  /// The stride of axis `r`, in elements.
  /// mdspan has no strides at rank 0; a scalar view answers 1 so copies and stores compile.
  FUSOR_HOST_DEVICE index_t stride([[maybe_unused]] std::size_t r) const {
    if constexpr (rank == 0) return 1;
    else return span_.stride(r);
  }
  /// The number of elements.
  FUSOR_HOST_DEVICE index_t size() const { return static_cast<index_t>(span_.size()); }
  /// No gaps and no overlap: element positions are exactly [0, size).
  FUSOR_HOST_DEVICE bool is_contiguous() const {
    return static_cast<index_t>(span_.mapping().required_span_size()) == size() && span_.is_unique();
  }

  /// The element at multi-index `i...`; dereferences memory, so only where `Space` is accessible.
  template <class... Indices>
  FUSOR_HOST_DEVICE element_type& operator()(Indices... i) const {
    return span_(static_cast<index_type>(i)...);
  }

  // ---- leaf of an expression ------------------------------------------------
  /// Offset of the element that output multi-index `idx` (rank R >= rank) reads:
  /// leading axes are missing, size-1 axes broadcast.
  template <std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t offset_of(const ::cuda::std::array<index_t, R>& idx) const {
    static_assert(R >= rank);
    index_t offset = 0;
    FUSOR_UNROLL
    for (std::size_t k = 0; k != rank; ++k)
      if (Extents::static_extent(k) != 1 && extent(k) != 1) offset += idx[R - rank + k] * stride(k);
    return offset;
  }
  /// The element that output multi-index `idx` reads (see offset_of), converted to value_type.
  template <std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE value_type at(const ::cuda::std::array<index_t, R>& idx) const {
    return convert<value_type>(data()[offset_of(idx)]);
  }
  /// Elements [i, i + V) of the memory, converted to value_type; `Aligned` promises 16-byte alignment.
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load(index_t i) const {
    const lanes<element_type, V> raw = load_lanes<V, Aligned>(data() + i);
    lanes<value_type, V> out;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) out[j] = convert<value_type>(raw[j]);
    return out;
  }
  /// Whether this operand can be read at the destination's linear positions.
  template <std::size_t R>
  bool linear_with(const dense_shape<R>& dst) const {
    if constexpr (R != rank) {
      return false;
    } else {
      for (std::size_t k = 0; k != rank; ++k) {
        if (extent(k) != dst.extent[k]) return false;
        if (extent(k) != 1 && stride(k) != dst.stride[k]) return false;
      }
      return true;
    }
  }
  /// Whether data() is 16-byte aligned.
  bool aligned16() const { return reinterpret_cast<std::uintptr_t>(data()) % 16 == 0; }

  // ---- rows: V consecutive output elements along one axis ------------------------
  /// Whether, along output axis `inner` of a rank-R destination, this operand's elements are consecutive in
  /// memory (stride 1) or one element repeated (the axis broadcast): what the row-wise vector path needs.
  template <std::size_t R>
  bool rows_along(int inner) const {
    return broadcast_along<R>(inner) || stride(std::size_t(inner - int(R - rank))) == 1;
  }
  /// Whether every row along output axis `inner` starts 16-byte aligned: data() is, and so is every step of
  /// the other axes (rows read one element, broadcast, need nothing).
  template <std::size_t R>
  bool rows_aligned16(int inner) const {
    if (broadcast_along<R>(inner)) return true;
    const int k = inner - int(R - rank);
    for (std::size_t a = 0; a != rank; ++a)
      if (int(a) != k && extent(a) != 1 && stride(a) * index_t(sizeof(element_type)) % 16 != 0) return false;
    return aligned16();
  }
  /// Whether output axis `inner` of a rank-R destination is missing here or of extent 1 (each row reads one
  /// element). Axis by axis with constant indices: an extent read at a run-time index would copy the extents to
  /// local memory on the GPU.
  template <std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE bool broadcast_along(int inner) const {
    bool broadcast = inner < int(R - rank);
    FUSOR_UNROLL
    for (std::size_t a = 0; a != rank; ++a)
      if (int(R - rank + a) == inner) broadcast = extent(a) == 1;
    return broadcast;
  }
  /// Output elements idx, idx + 1, ..., idx + V - 1 along axis `inner` (rank-R multi-indices), converted to
  /// value_type: one vector load, or one element V times where the axis is broadcast. `Aligned` promises
  /// rows_aligned16.
  template <int V, bool Aligned, std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load_row(const ::cuda::std::array<index_t, R>& idx,
                                                                     int inner) const {
    const element_type* at = data() + offset_of(idx);
    lanes<value_type, V> out;
    if (broadcast_along<R>(inner)) {
      const value_type v = convert<value_type>(*at);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) out[j] = v;
    } else {
      const lanes<element_type, V> raw = load_lanes<V, Aligned>(at);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) out[j] = convert<value_type>(raw[j]);
    }
    return out;
  }

  // ---- destination of an assignment -------------------------------------------
  /// Stores `v`, converted to element_type, at multi-index `idx`.
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store_at(const ::cuda::std::array<index_t, rank>& idx, const T& v) const {
    data()[offset_of(idx)] = convert<element_type>(v);
  }
  /// Stores `values`, converted to element_type, to elements [i, i + V); `Aligned` promises 16-byte alignment.
  template <int V, bool Aligned, class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store(index_t i, const lanes<T, V>& values) const {
    lanes<element_type, V> raw;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) raw[j] = convert<element_type>(values[j]);
    store_lanes<V, Aligned>(data() + i, raw);
  }
  /// Stores `values`, converted to element_type, to multi-indices idx, idx + 1, ..., along axis `inner`, where
  /// this view's stride is 1; `Aligned` promises rows_aligned16.
  template <int V, bool Aligned, class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store_row(const ::cuda::std::array<index_t, rank>& idx,
                                                      const lanes<T, V>& values) const {
    lanes<element_type, V> raw;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) raw[j] = convert<element_type>(values[j]);
    store_lanes<V, Aligned>(data() + offset_of(idx), raw);
  }
  /// Its extents and strides, which operands must match to be read at its linear positions.
  dense_shape<rank> shape_and_strides() const {
    dense_shape<rank> s;
    for (std::size_t k = 0; k != rank; ++k) {
      s.extent[k] = extent(k);
      s.stride[k] = stride(k);
    }
    return s;
  }

 private:
  mdspan_type span_;
};

/// Whether `T` is a fusor::view.
template <class T>
inline constexpr bool is_view_v = false;
/// True for every view.
template <class P, class E, class L, class S>
inline constexpr bool is_view_v<view<P, E, L, S>> = true;

/// The same view with every extent dynamic. Where the sizes were checked already (a layer's, when its network was
/// composed), a kernel given such views is one instance for every size, not one per layer shape: less to compile.
template <class P, class E, class L, class S>
FUSOR_HOST_DEVICE view<P, dextents<typename E::index_type, E::rank()>, L, S> with_dynamic_extents(
    const view<P, E, L, S>& v) {
  using result = view<P, dextents<typename E::index_type, E::rank()>, L, S>;
  return result(v.data(), typename result::mapping_type(v.mapping()));
}

}  // namespace fusor
