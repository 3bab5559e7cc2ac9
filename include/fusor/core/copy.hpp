// fusor/core/copy.hpp — copies between any two memory spaces, synchronous or
// asynchronous on a stream.
//
// Contiguous views with the same strides copy as one block (cudaMemcpy with
// unified addressing picks the direction). Views in different orders copy
// element by element on the host; across spaces they must share a layout
// (reorder on one side with assign() first): a silent slow path would hide a
// mistake.
#pragma once

#include <cstring>
#include <type_traits>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/view.hpp"

namespace fusor {

/// The view of a tensor, or `x` itself for a view.
template <class T>
decltype(auto) as_view(const T& x) {
  if constexpr (is_tensor_v<T>) return x.view();
  else return (x);
}

namespace detail {
template <class D, class S>
bool same_dense_order(const D& dst, const S& src) {
  if (!dst.is_contiguous() || !src.is_contiguous()) return false;
  for (std::size_t r = 0; r != D::rank; ++r)
    if (dst.extent(r) != 1 && dst.stride(r) != src.stride(r)) return false;
  return true;
}

template <class D, class S>
void check_copy(const D& dst, const S& src) {
  static_assert(std::is_same_v<typename D::element_type, typename S::element_type>,
                "fusor: copy moves bytes between views of one element type; convert with assign() and cast<>");
  static_assert(D::rank == S::rank, "fusor: copy between views of different rank");
  for (std::size_t r = 0; r != D::rank; ++r)
    if (dst.extent(r) != src.extent(r))
      throw shape_error("fusor: cannot copy a view of shape " + shape_string(src.extents()) +
                        " into one of shape " + shape_string(dst.extents()));
}

// Element by element in the destination's order, for host-accessible views.
template <class D, class S>
void copy_elements(const D& dst, const S& src) {
  ::cuda::std::array<index_t, D::rank> idx{};
  const index_t n = dst.size();
  for (index_t i = 0; i < n; ++i) {
    dst.data()[dst.offset_of(idx)] = src.data()[src.offset_of(idx)];
    for (std::size_t k = D::rank; k-- > 0;) {
      if (++idx[k] < dst.extent(k)) break;
      idx[k] = 0;
    }
  }
}

template <class D, class S>
void copy_impl(const D& dst, const S& src, [[maybe_unused]] stream_t stream, [[maybe_unused]] bool asynchronous) {
  check_copy(dst, src);
  if (dst.size() == 0) return;  // an empty tensor's data() may be null: nothing to copy, no memcpy(nullptr)
  using DS = typename D::space;
  using SS = typename S::space;
  constexpr bool both_host = DS::host_accessible && SS::host_accessible;
  const bool block = same_dense_order(dst, src);
  const std::size_t bytes = static_cast<std::size_t>(dst.size()) * sizeof(typename D::element_type);
  if constexpr (std::is_same_v<DS, host_space> && std::is_same_v<SS, host_space>) {
    if (block) std::memcpy(dst.data(), src.data(), bytes);
    else copy_elements(dst, src);
  } else {
#if FUSOR_HAS_CUDA
    if (block) {
      if (asynchronous) {
        FUSOR_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDefault, stream));
      } else {
        // cudaMemcpy is ordered with the legacy default stream only, not with
        // non-blocking streams, and a host-to-device copy may return before it
        // lands: wait for the whole device before and after.
        FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
        FUSOR_CUDA_CHECK(cudaMemcpy(dst.data(), src.data(), bytes, cudaMemcpyDefault));
        FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
      }
    } else if constexpr (both_host) {
      if (asynchronous) FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream));
      else FUSOR_CUDA_CHECK(cudaDeviceSynchronize());  // pinned memory a kernel may still use
      copy_elements(dst, src);
    } else {
      throw error("fusor: a copy to or from device memory needs two contiguous views in the same order; "
                  "reorder one side with assign() first");
    }
#else
    static_assert(both_host, "fusor: copies to or from device memory need a translation unit compiled by nvcc");
    copy_elements(dst, src);
#endif
  }
}
}  // namespace detail

/// Copies and returns when the data has arrived. Where device or pinned memory is
/// involved it first waits for all work on the device, on every stream, so it is
/// right whichever stream wrote the source or will read the destination: a copy
/// for set-up, reports and tests. Inside a training step use copy_async on the
/// step's stream.
template <class Dst, class Src>
void copy(const Dst& dst, const Src& src) {
  detail::copy_impl(as_view(dst), as_view(src), stream_t{}, false);
}

/// Queues the copy on `stream`; pinned host memory makes it truly asynchronous.
template <class Dst, class Src>
void copy_async(const Dst& dst, const Src& src, stream_t stream) {
  detail::copy_impl(as_view(dst), as_view(src), stream, true);
}

}  // namespace fusor
