// fusor/optim/flat_state.hpp — what the optimizers share about their state:
// flat 1-D views and tensors over a parameter buffer, zero-filled state, the
// fp32 master copy of 16-bit parameters (and the destination that writes the
// master and its rounding in one store), and the size checks.
//
// An optimizer keeps its state (moments, master weights) in the compute type
// of the parameters' precision: fp32 for fp32, bf16 and fp16 parameters (fp64
// for fp64). Parameters stored narrower than that (bf16, fp16) get master
// weights: the update happens on the master copy and the parameters receive
// its rounding, so small updates are not lost to 8- or 11-bit mantissas.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/vector_access.hpp"
#include "fusor/core/view.hpp"

namespace fusor::optim {

/// A 1-D row-major view of precision P in `Space`: a parameter, gradient or state buffer.
template <class P, class Space>
using flat_view = view<P, dextents<index_t, 1>, row_major, Space>;
/// A 1-D row-major tensor of precision P in `Space`, owning its memory (optimizer state).
template <class P, class Space>
using flat_tensor = tensor<P, dextents<index_t, 1>, row_major, Space>;

/// The state of an optimizer for parameters of precision P.
template <class P>
struct state_traits {
  /// How the parameters' elements are stored.
  using storage_type = storage_t<P>;
  /// Element type of the state (moments, master weights): P's compute type.
  using state_type = compute_t<P>;
  /// Whether parameters are stored narrower than the state, so the optimizer keeps master weights.
  static constexpr bool has_master_weights = !std::is_same_v<storage_type, state_type>;
};

/// A view of any precision whose elements are stored as T (fusor::bf16 and
/// __nv_bfloat16 name the same memory).
template <class V, class T>
concept flat_view_of = is_view_v<V> && V::rank == 1 && std::is_same_v<typename V::element_type, T> &&
                       std::is_same_v<typename V::layout_type, row_major>;
/// A flat_view_of T, or a tensor of one (the optimizers take either).
template <class V, class T>
concept flat_buffer_of = flat_view_of<V, T> || (is_tensor_v<V> && flat_view_of<typename V::view_type, T>);

/// A destination that stores each value twice: into the master weights and,
/// rounded, into the parameters. The weights' update is then computed once per
/// element (as two targets of one pass it would be computed twice: targets
/// share no work). Built on two views; the pass's vector width follows the
/// narrower one.
template <class Master, class Params>
struct master_and_parameters {
  /// The narrower of the two views' element types (it sets the pass's vector width).
  using element_type = std::conditional_t<(sizeof(typename Params::element_type) < sizeof(typename Master::element_type)),
                                          typename Params::element_type, typename Master::element_type>;
  /// The master weights' value type.
  using value_type = typename Master::value_type;
  /// The master weights' extents (the parameters have the same).
  using extents_type = typename Master::extents_type;
  /// The master weights' memory space.
  using space = typename Master::space;
  /// The master weights' rank (1 for the optimizers).
  static constexpr std::size_t rank = Master::rank;
  /// False, as for a view (weak marks literal scalars, which take the type of what they meet).
  static constexpr bool weak = false;
  /// Size in bytes of element_type, the narrower element.
  static constexpr std::size_t narrowest_element = sizeof(element_type);

  /// Where the values go at full precision.
  Master master;
  /// Where the values go rounded to the parameters' precision.
  Params params;

  /// The master weights' extents.
  FUSOR_HOST_DEVICE const extents_type& extents() const { return master.extents(); }
  /// The master weights' extent `r`.
  FUSOR_HOST_DEVICE index_t extent(std::size_t r) const { return master.extent(r); }
  /// The number of elements (of each of the two views).
  FUSOR_HOST_DEVICE index_t size() const { return master.size(); }
  /// The master weights' data.
  FUSOR_HOST_DEVICE auto* data() const { return master.data(); }
  /// Whether both views are contiguous.
  bool is_contiguous() const { return master.is_contiguous() && params.is_contiguous(); }
  /// The master weights' extents and strides.
  auto shape_and_strides() const { return master.shape_and_strides(); }
  /// Whether both views can be written at `dst`'s linear positions.
  template <std::size_t R>
  bool linear_with(const dense_shape<R>& dst) const { return master.linear_with(dst) && params.linear_with(dst); }
  /// Whether both views' data are 16-byte aligned.
  bool aligned16() const { return master.aligned16() && params.aligned16(); }

  /// Stores `v` at index `idx` of both views.
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store_at(const ::cuda::std::array<index_t, rank>& idx, const T& v) const {
    master.store_at(idx, v);
    params.store_at(idx, v);
  }
  /// Stores V lanes at linear positions [i, i + V) of both views.
  template <int V, bool Aligned, class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store(index_t i, const lanes<T, V>& values) const {
    master.template store<V, Aligned>(i, values);
    params.template store<V, Aligned>(i, values);
  }
};
static_assert(std::is_trivially_copyable_v<master_and_parameters<flat_view<float, host_space>, flat_view<bf16, host_space>>>);

namespace detail {
template <class T, class Space>
flat_tensor<T, Space> zero_tensor(index_t n, stream_t stream) {
  flat_tensor<T, Space> t(dextents<index_t, 1>(n), stream);
  if (n == 0) return t;
  if constexpr (Space::host_accessible && !Space::device_accessible) {
    std::memset(t.data(), 0, std::size_t(n) * sizeof(T));
  } else {
#if FUSOR_HAS_CUDA
    FUSOR_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, std::size_t(n) * sizeof(T), stream));
#endif
  }
  return t;
}

FUSOR_DECL void check_size(const char* who, const char* what, index_t expected, index_t got);
// A step of state elements [first, first + n) (optimizers' step_part), with n gradients.
FUSOR_DECL void check_part(const char* who, index_t first, index_t n, index_t count, index_t gradients);
template <class T, class Space>
flat_view<T, Space> state_part(const flat_tensor<T, Space>& t, index_t first, index_t n) {
  return {t.data() + first, n};
}
}  // namespace detail

}  // namespace fusor::optim

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/optim/impl/flat_state.ipp"
#endif
