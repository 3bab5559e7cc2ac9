// fusor/core/layout.hpp — layout policies, as ::cuda::std::mdspan layout policies.
//
// row_major and col_major are the standard layout_right / layout_left. For 4-D
// tensors the logical index order is always (n, c, h, w); nchw stores it in that
// order, nhwc keeps channels innermost. Strided views (transpose, slice,
// permute) use layout_stride. Every fusor layout is strided, which lets
// expressions address any of them through (extent, stride) pairs.
#pragma once

#include <cuda/std/array>
#include <cuda/std/mdspan>

#include "fusor/config.hpp"

namespace fusor {

using row_major = ::cuda::std::layout_right;  ///< Row-major: the last axis contiguous.
using col_major = ::cuda::std::layout_left;   ///< Column-major: the first axis contiguous.
using strided = ::cuda::std::layout_stride;   ///< Any strides: transposed, permuted and sliced views.
using nchw = ::cuda::std::layout_right;       ///< 4-D (n, c, h, w), stored in that order.

/// Logical (n, c, h, w), stored as n, h, w, c with c contiguous.
struct nhwc {
  /// The `cuda::std::mdspan` layout mapping of nhwc for 4-D `Extents`.
  template <class Extents>
  class mapping {
   public:
    static_assert(Extents::rank() == 4, "fusor: the nhwc layout is for 4-D tensors indexed (n, c, h, w)");
    using extents_type = Extents;                       ///< The shape type.
    using index_type = typename Extents::index_type;    ///< The index type of the shape.
    using size_type = typename Extents::size_type;      ///< The size type of the shape.
    using rank_type = typename Extents::rank_type;      ///< The type of an axis number.
    using layout_type = nhwc;                           ///< The layout policy this maps for.

    /// A mapping of default-constructed extents.
    constexpr mapping() noexcept = default;
    /// Maps shape `e`, given as (n, c, h, w).
    FUSOR_HOST_DEVICE constexpr mapping(const Extents& e) noexcept : extents_(e) {}
    /// Converts from a mapping of other, compatible extents.
    template <class Other>
    FUSOR_HOST_DEVICE constexpr mapping(const mapping<Other>& other) noexcept : extents_(other.extents()) {}

    /// The shape, as (n, c, h, w).
    FUSOR_HOST_DEVICE constexpr const extents_type& extents() const noexcept { return extents_; }
    /// The number of elements stored: n * c * h * w.
    FUSOR_HOST_DEVICE constexpr index_type required_span_size() const noexcept {
      return extents_.extent(0) * extents_.extent(1) * extents_.extent(2) * extents_.extent(3);
    }
    /// The storage offset of logical element (n, c, h, w).
    template <class N, class C, class H, class W>
    FUSOR_HOST_DEVICE constexpr index_type operator()(N n, C c, H h, W w) const noexcept {
      const index_type C_ = extents_.extent(1), H_ = extents_.extent(2), W_ = extents_.extent(3);
      return ((static_cast<index_type>(n) * H_ + static_cast<index_type>(h)) * W_ + static_cast<index_type>(w)) * C_ +
             static_cast<index_type>(c);
    }
    /// The storage stride of logical axis `r` (0 = n, 1 = c, 2 = h, 3 = w); channels have stride 1.
    FUSOR_HOST_DEVICE constexpr index_type stride(rank_type r) const noexcept {
      const index_type C_ = extents_.extent(1), H_ = extents_.extent(2), W_ = extents_.extent(3);
      switch (r) {
        case 0: return H_ * W_ * C_;
        case 1: return 1;
        case 2: return W_ * C_;
        default: return C_;
      }
    }
    /// Distinct indices always map to distinct offsets.
    FUSOR_HOST_DEVICE static constexpr bool is_always_unique() noexcept { return true; }
    /// Every offset below required_span_size() is always used.
    FUSOR_HOST_DEVICE static constexpr bool is_always_exhaustive() noexcept { return true; }
    /// The mapping always has per-axis strides.
    FUSOR_HOST_DEVICE static constexpr bool is_always_strided() noexcept { return true; }
    /// True: see is_always_unique().
    FUSOR_HOST_DEVICE static constexpr bool is_unique() noexcept { return true; }
    /// True: see is_always_exhaustive().
    FUSOR_HOST_DEVICE static constexpr bool is_exhaustive() noexcept { return true; }
    /// True: see is_always_strided().
    FUSOR_HOST_DEVICE static constexpr bool is_strided() noexcept { return true; }

    template <class Other>
    FUSOR_HOST_DEVICE friend constexpr bool operator==(const mapping& a, const mapping<Other>& b) noexcept {
      return a.extents() == b.extents();
    }

   private:
    Extents extents_{};
  };
};

}  // namespace fusor
