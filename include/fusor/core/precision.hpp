// fusor/core/precision.hpp — precision policies: what a tensor stores, what its
// elementwise work computes in, and what reductions accumulate in.
//
// A tensor's first template argument is either a plain element type (float,
// double, __nv_bfloat16, __half, integers) or one of the policy tags below;
// precision_traits resolves both, so `tensor<float, ...>` and `tensor<bf16, ...>`
// read naturally. bf16/fp16 storage computes and accumulates in fp32.
#pragma once

#include <cuda/std/cstdint>
#include <cuda/std/type_traits>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "fusor/config.hpp"

namespace fusor {

using bfloat16 = __nv_bfloat16;  ///< CUDA's bfloat16 type.
using float16 = __half;          ///< CUDA's half-precision type.

/// Storage, compute and accumulate types named separately.
template <class Storage, class Compute = float, class Accumulate = Compute>
struct mixed {
  using storage_type = Storage;  ///< The element type kept in memory.
  using compute_type = Compute;  ///< The type elementwise work computes in.
  using accumulate_type = Accumulate;  ///< The type reductions accumulate in.
  static constexpr bool tensor_float_32 = false;  ///< Whether matrix products may round inputs to tf32.
};

/// fp32 storage, compute and accumulation.
struct fp32 : mixed<float, float, float> {};
/// fp64 storage, compute and accumulation.
struct fp64 : mixed<double, double, double> {};
/// bfloat16 storage, computing and accumulating in fp32.
struct bf16 : mixed<bfloat16, float, float> {};
/// fp16 (half) storage, computing and accumulating in fp32.
struct fp16 : mixed<float16, float, float> {};
/// fp32 storage; matrix products may round their inputs to tf32 on tensor cores.
struct tf32 : mixed<float, float, float> {
  static constexpr bool tensor_float_32 = true;  ///< Matrix products may round inputs to tf32.
};

namespace detail {
template <class T>
concept precision_policy = requires {
  typename T::storage_type;
  typename T::compute_type;
  typename T::accumulate_type;
};
template <class T>
struct default_compute { using type = T; };
template <> struct default_compute<bfloat16> { using type = float; };
template <> struct default_compute<float16> { using type = float; };
}  // namespace detail

/// Resolves a tensor's first template argument, a plain element type `P`, to its precision: `P` is stored,
/// and work computes and accumulates in `P`, except in float for bfloat16 and float16.
template <class P>
struct precision_traits {
  using storage_type = P;  ///< The element type kept in memory.
  using compute_type = typename detail::default_compute<P>::type;  ///< The type elementwise work computes in.
  using accumulate_type = compute_type;  ///< The type reductions accumulate in.
  static constexpr bool tensor_float_32 = false;  ///< Plain element types never use tf32.
};
/// The precision of a policy tag such as bf16 or mixed<...>: its own types.
template <detail::precision_policy P>
struct precision_traits<P> {
  using storage_type = typename P::storage_type;  ///< The element type kept in memory.
  using compute_type = typename P::compute_type;  ///< The type elementwise work computes in.
  using accumulate_type = typename P::accumulate_type;  ///< The type reductions accumulate in.
  static constexpr bool tensor_float_32 = P::tensor_float_32;  ///< Whether matrix products may round inputs to tf32.
};

/// The element type stored for precision `P` (an element type or a policy).
template <class P> using storage_t = typename precision_traits<P>::storage_type;
/// The type elementwise work computes in for precision `P`.
template <class P> using compute_t = typename precision_traits<P>::compute_type;
/// The type reductions accumulate in for precision `P`.
template <class P> using accumulate_t = typename precision_traits<P>::accumulate_type;

/// Conversion between any two element types, on host and device. bf16 <-> fp16
/// goes through float: there is no direct conversion.
template <class To, class From>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr To convert(const From& x) {
  if constexpr (::cuda::std::is_same_v<To, From>) {
    return x;
  } else if constexpr (::cuda::std::is_same_v<From, bfloat16> || ::cuda::std::is_same_v<From, float16>) {
    if constexpr (::cuda::std::is_same_v<To, bfloat16> || ::cuda::std::is_same_v<To, float16>)
      return To(static_cast<float>(x));
    else
      return static_cast<To>(static_cast<float>(x));
  } else if constexpr (::cuda::std::is_same_v<To, bfloat16> || ::cuda::std::is_same_v<To, float16>) {
    return To(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

/// A bfloat16 or float16 from its 16 bits, as a file or a packed 32-bit word holds them.
template <class T>
  requires(::cuda::std::is_same_v<T, bfloat16> || ::cuda::std::is_same_v<T, float16>)
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T from_bits(::cuda::std::uint16_t bits) {
  if constexpr (::cuda::std::is_same_v<T, bfloat16>) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return T(raw);
  } else {
    __half_raw raw;
    raw.x = bits;
    return T(raw);
  }
}

}  // namespace fusor
