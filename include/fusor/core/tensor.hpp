// fusor/core/tensor.hpp — fusor::tensor, the owning side of the owner/view split.
//
// A tensor owns one allocation in its memory space and hands out views; it never
// enters a kernel itself. Device tensors are allocated and freed in stream order
// on the stream they were created with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "fusor/core/extents.hpp"
#include "fusor/core/layout.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/view.hpp"

namespace fusor {

namespace detail {
// A size given to a tensor's constructor must be one its extents' index type
// holds: a larger one would wrap around (to zero, or negative) unseen.
template <class IndexType, class Size>
void check_tensor_size(Size size) {
  using limits = std::numeric_limits<IndexType>;
  bool negative = false;
  if constexpr (std::is_signed_v<Size>) negative = size < 0;
  if (negative)
    throw shape_error("fusor: a tensor size of " + std::to_string(size) + ": sizes are 0 or more");
  if (std::uintmax_t(size) > std::uintmax_t(limits::max()))
    throw shape_error("fusor: a tensor size of " + std::to_string(size) + " does not fit its extents' index type (at " +
                      "most " + std::to_string(limits::max()) + "); larger tensors need extents of fusor::index_t");
}
// checked_tensor_bytes' shape_error for a tensor of shape `shape` whose index type counts `max_count` at most.
[[noreturn]] FUSOR_DECL void throw_tensor_too_large(const std::string& shape, std::uintmax_t max_count);
// The element count of `e`, which must fit its index type (a wrapped product
// would allocate too little), and its bytes, which must fit std::size_t.
template <class Extents>
std::size_t checked_tensor_bytes(const Extents& e, std::size_t element_size) {
  using I = typename Extents::index_type;
  std::uintmax_t count = 1;
  bool overflow = false;
  if constexpr (Extents::rank() > 0)  // (a rank-0 loop draws nvcc's "pointless comparison" warning)
    for (std::size_t r = 0; r < Extents::rank(); ++r) {
      const auto size = std::uintmax_t(e.extent(r));
      if (size != 0 && count > std::uintmax_t(std::numeric_limits<I>::max()) / size) overflow = true;
      count *= size;
    }
  if (overflow || count > std::uintmax_t(std::numeric_limits<I>::max()) ||
      count > std::uintmax_t(std::numeric_limits<std::size_t>::max()) / element_size)
    throw_tensor_too_large(shape_string(e), std::uintmax_t(std::numeric_limits<I>::max()));
  return std::size_t(count) * element_size;
}
}  // namespace detail

/// An owning, move-only array of shape `Extents` in memory space `Space`, stored in the gap-free `Layout`;
/// its elements start uninitialised. `Precision` is an element type or a precision policy (bf16, mixed<...>).
///
/// Device tensors are allocated and freed in order on the stream they were created with.
template <class Precision, class Extents, class Layout = row_major, class Space = host_space>
class tensor {
 public:
  using view_type = ::fusor::view<Precision, Extents, Layout, Space>;  ///< The view it hands out.
  using element_type = typename view_type::element_type;  ///< The element type kept in memory.
  using value_type = typename view_type::value_type;  ///< The type elements are computed in.
  using extents_type = Extents;  ///< The shape type.
  using layout_type = Layout;  ///< The layout policy.
  using space = Space;  ///< The memory space.
  using mapping_type = typename view_type::mapping_type;  ///< The layout mapping of its extents.
  static constexpr std::size_t rank = Extents::rank();  ///< The number of axes.
  static_assert(mapping_type::is_always_exhaustive(),
                "fusor: an owning tensor needs a gap-free layout (row_major, col_major, nchw, nhwc); "
                "strided layouts are for views");

  /// All-static extents allocate here; dynamic ones default to zero sizes (no memory).
  tensor() : tensor(Extents{}) {}
  /// Allocates a tensor of shape `e`, ordered on `stream` for device memory; throws shape_error when its
  /// element count overflows the index type, allocation_error when memory cannot be had.
  explicit tensor(const Extents& e, stream_t stream = {}) : stream_(stream) {
    const std::size_t bytes = detail::checked_tensor_bytes(e, sizeof(element_type));
    const mapping_type map(e);
    auto* data = static_cast<element_type*>(allocate<Space>(bytes, stream));
    view_ = view_type(data, map);
  }
  /// Allocates a tensor with the given dynamic extents, in order; throws shape_error for a negative size or
  /// one the index type cannot hold.
  template <class... Sizes>
    requires(sizeof...(Sizes) == Extents::rank_dynamic() && (std::is_integral_v<Sizes> && ...))
  explicit tensor(Sizes... dynamic_sizes) : tensor(checked_extents(dynamic_sizes...)) {}

  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;
  /// Takes `other`'s memory, leaving it empty (null data, size 0).
  tensor(tensor&& other) noexcept
      : view_(std::exchange(other.view_, view_type{})), stream_(other.stream_) {}
  /// Frees this tensor's memory and takes `other`'s, leaving it empty.
  tensor& operator=(tensor&& other) noexcept {
    if (this != &other) {
      release();
      view_ = std::exchange(other.view_, view_type{});
      stream_ = other.stream_;
    }
    return *this;
  }
  ~tensor() { release(); }

  /// A non-owning view of the whole tensor; it does not keep the memory alive.
  const view_type& view() const { return view_; }
  /// Converts to view().
  operator view_type() const { return view_; }

  /// The first element, or nullptr when empty or moved from.
  element_type* data() const { return view_.data(); }
  /// The shape.
  const Extents& extents() const { return view_.extents(); }
  /// The extent of axis `r`.
  index_t extent(std::size_t r) const { return view_.extent(r); }
  /// The number of elements. Zero for a moved-from tensor, whatever its static extents say.
  index_t size() const { return data() ? view_.size() : 0; }
  /// The stream the memory was allocated on and is freed on.
  stream_t stream() const { return stream_; }

  /// The element at multi-index `i...`; host-accessible spaces only.
  template <class... Indices>
  element_type& operator()(Indices... i) const {
    static_assert(Space::host_accessible, "fusor: elements of a device tensor are not addressable on the host");
    return view_(i...);
  }

 private:
  template <class... Sizes>
  static Extents checked_extents(Sizes... sizes) {
    (detail::check_tensor_size<typename Extents::index_type>(sizes), ...);
    return Extents(sizes...);
  }

  void release() noexcept {
    deallocate<Space>(view_.data(), stream_);
    view_ = view_type{};
  }
  view_type view_{};
  stream_t stream_{};
};

/// Whether `T` is a fusor::tensor.
template <class T>
inline constexpr bool is_tensor_v = false;
/// True for every tensor.
template <class P, class E, class L, class S>
inline constexpr bool is_tensor_v<tensor<P, E, L, S>> = true;

}  // namespace fusor

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/core/impl/tensor.ipp"
#endif
