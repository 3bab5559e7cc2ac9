// fusor/core/vector_access.hpp — loading and storing V consecutive elements, as
// 16-byte transactions on the GPU when the caller has checked alignment.
//
// Expressions evaluate V elements at a time on the fast path; this is the one
// place that knows how those elements travel to and from memory.
#pragma once

#include <cstddef>
#if defined(FUSOR_CHECK_VECTOR_ALIGNMENT)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#endif

#include <cuda/std/array>

#include "fusor/config.hpp"
#include "fusor/core/precision.hpp"

namespace fusor {

/// Whether V elements of T form whole 16-byte chunks.
template <class T, int V>
inline constexpr bool whole_chunks_v = (V * sizeof(T)) % 16 == 0;

/// V values held in registers; 16-byte aligned when they fill whole chunks so
/// they can be moved as such.
template <class T, int V>
struct alignas(whole_chunks_v<T, V> ? 16 : alignof(T)) lanes {
  T value[V];  ///< The values.
  /// Value `j`, 0 <= j < V.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T& operator[](int j) { return value[j]; }
  /// Value `j`, 0 <= j < V.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr const T& operator[](int j) const { return value[j]; }
};

namespace detail {
struct alignas(16) sixteen_bytes {
  unsigned int x, y, z, w;
};
// The host tests that run device code under the SIMT emulator define
// FUSOR_CHECK_VECTOR_ALIGNMENT: there a 16-byte access the GPU would make at
// an address off a 16-byte boundary (a fault there) stops the test here.
template <int V, bool Aligned, class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void check_vector_access([[maybe_unused]] const T* p) {
#if defined(FUSOR_CHECK_VECTOR_ALIGNMENT) && !FUSOR_DEVICE_PASS
  if constexpr (Aligned && whole_chunks_v<T, V>) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
      std::fprintf(stderr, "fusor: a 16-byte vector access at %p, off a 16-byte boundary\n",
                   static_cast<const void*>(p));
      std::abort();
    }
  }
#endif
}
}  // namespace detail

/// Loads p[0, V); in device code, as 16-byte loads when `Aligned` (p 16-byte aligned) and V elements are
/// whole chunks.
template <int V, bool Aligned, class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<T, V> load_lanes(const T* p) {
  lanes<T, V> out;
  detail::check_vector_access<V, Aligned>(p);
#if FUSOR_DEVICE_PASS
  if constexpr (Aligned && whole_chunks_v<T, V>) {
    // One 16-byte load per chunk: ld.global.v4 in the SASS.
    auto* dst = reinterpret_cast<detail::sixteen_bytes*>(&out[0]);
    const auto* src = reinterpret_cast<const detail::sixteen_bytes*>(p);
    FUSOR_UNROLL
    for (int c = 0; c < int(V * sizeof(T) / 16); ++c) dst[c] = src[c];
    return out;
  } else
#endif
  {
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) out[j] = p[j];
    return out;
  }
}

/// Stores `values` to p[0, V); in device code, as 16-byte stores when `Aligned` and V elements are whole chunks.
template <int V, bool Aligned, class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store_lanes(T* p, const lanes<T, V>& values) {
  detail::check_vector_access<V, Aligned>(p);
#if FUSOR_DEVICE_PASS
  if constexpr (Aligned && whole_chunks_v<T, V>) {
    const auto* src = reinterpret_cast<const detail::sixteen_bytes*>(&values[0]);
    auto* dst = reinterpret_cast<detail::sixteen_bytes*>(p);
    FUSOR_UNROLL
    for (int c = 0; c < int(V * sizeof(T) / 16); ++c) dst[c] = src[c];
  } else
#endif
  {
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) p[j] = values[j];
  }
}

}  // namespace fusor
