// fusor/expr/functors.hpp — the scalar operations expression nodes apply, one
// small function object each, callable on host and device.
//
// They receive arguments already converted to the node's compute type, so each
// is written once for float and double alike. Where IEEE semantics need care
// (NaN through min/max/relu, overflow in softplus) the comment says how.
#pragma once

#include <cuda/std/cmath>

#include "fusor/config.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/expr/host_math.hpp"

namespace fusor::ops {

#define FUSOR_BINARY_FUNCTOR(name, expression)                                       \
  struct name {                                                                       \
    static constexpr const char* spelling = #name; /* for shape errors */             \
    template <class T>                                                                \
    FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr auto operator()(T a, T b) const { \
      return expression;                                                              \
    }                                                                                 \
  };
#define FUSOR_UNARY_FUNCTOR(name, expression)                                   \
  struct name {                                                                  \
    static constexpr const char* spelling = #name; /* for shape errors */        \
    template <class T>                                                           \
    FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr auto operator()(T x) const { \
      return expression;                                                         \
    }                                                                            \
  };
// Functions of real numbers: an integer operand computes in float (node.hpp), as in PyTorch; exp of an int
// tensor in int would truncate every value.
#define FUSOR_FLOATING_UNARY_FUNCTOR(name, expression)                          \
  struct name {                                                                  \
    static constexpr const char* spelling = #name; /* for shape errors */        \
    static constexpr bool floating = true;                                       \
    template <class T>                                                           \
    FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr auto operator()(T x) const { \
      return expression;                                                         \
    }                                                                            \
  };

// Doxygen does not expand these macros: the cond section keeps their invocations out of the API reference.
/// \cond
// Arithmetic.
FUSOR_BINARY_FUNCTOR(plus, a + b)
FUSOR_BINARY_FUNCTOR(minus, a - b)
FUSOR_BINARY_FUNCTOR(multiplies, a * b)
FUSOR_BINARY_FUNCTOR(divides, a / b)
FUSOR_UNARY_FUNCTOR(negate, -x)

// Comparisons and logic: booleans, for where().
FUSOR_BINARY_FUNCTOR(less, a < b)
FUSOR_BINARY_FUNCTOR(less_equal, a <= b)
FUSOR_BINARY_FUNCTOR(greater, a > b)
FUSOR_BINARY_FUNCTOR(greater_equal, a >= b)
FUSOR_BINARY_FUNCTOR(equal_to, a == b)
FUSOR_BINARY_FUNCTOR(not_equal_to, a != b)
FUSOR_BINARY_FUNCTOR(logical_and, bool(a) && bool(b))
FUSOR_BINARY_FUNCTOR(logical_or, bool(a) || bool(b))
FUSOR_UNARY_FUNCTOR(logical_not, !bool(x))
/// \endcond

/// where(condition, a, b): `a` where the condition is nonzero, else `b`.
struct select {
  /// `condition != 0 ? a : b`.
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T operator()(T condition, T a, T b) const {
    return condition != T(0) ? a : b;
  }
};

/// Rounds through storage type To, then continues in To's compute type.
template <class To>
struct cast_to {
  /// `x` converted to storage_t<To>, then to compute_t<To>.
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr compute_t<To> operator()(T x) const {
    return convert<compute_t<To>>(convert<storage_t<To>>(x));
  }
};

namespace detail {
// tanh: a float on the host is fusor::detail::host_tanh, which a fused loop
// vectorises (libm's tanhf is a call per element); elsewhere the library's.
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T tanh_of(T x) {
#if !FUSOR_DEVICE_PASS
  if constexpr (::cuda::std::is_same_v<T, float>) return fusor::detail::host_tanh(x);
#endif
  return ::cuda::std::tanh(x);
}
// exp: a float on the host is fusor::detail::host_exp where math functions
// need not set errno (-fno-math-errno, which fusor::fusor sets with
// -fno-trapping-math): a fused loop then vectorises it, 7x faster than libm's
// expf under -march=native. Where the loop stays scalar, libm's call is
// faster, so it is kept there; on the GPU, the library's.
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T exp_of(T x) {
#if !FUSOR_DEVICE_PASS && defined(__NO_MATH_ERRNO__)
  if constexpr (::cuda::std::is_same_v<T, float>) return fusor::detail::host_exp(x);
#endif
  return ::cuda::std::exp(x);
}
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T sigmoid_of(T x) {
  return T(1) / (T(1) + exp_of(-x));
}
// GELU's tanh form, 0.5 x (1 + tanh u) with u = k (x + c x^3) and k = sqrt(2 / pi).
inline constexpr double gelu_tanh_k = 0.79788456080286535588;
inline constexpr double gelu_tanh_c = 0.044715;
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T gelu_tanh_inner(T x) {
  return T(gelu_tanh_k) * (x + T(gelu_tanh_c) * x * x * x);
}
}  // namespace detail

/// \cond
// Transcendentals and friends.
FUSOR_FLOATING_UNARY_FUNCTOR(exp, detail::exp_of(x))
FUSOR_FLOATING_UNARY_FUNCTOR(log, ::cuda::std::log(x))
FUSOR_FLOATING_UNARY_FUNCTOR(log1p, ::cuda::std::log1p(x))
FUSOR_FLOATING_UNARY_FUNCTOR(tanh, detail::tanh_of(x))
FUSOR_FLOATING_UNARY_FUNCTOR(erf, ::cuda::std::erf(x))
FUSOR_FLOATING_UNARY_FUNCTOR(sqrt, ::cuda::std::sqrt(x))
FUSOR_UNARY_FUNCTOR(abs, ::cuda::std::fabs(x))
FUSOR_FLOATING_UNARY_FUNCTOR(sigmoid, detail::sigmoid_of(x))
// x < 0 rather than x > 0 so that NaN passes through, as in PyTorch.
FUSOR_UNARY_FUNCTOR(relu, x < T(0) ? T(0) : x)
FUSOR_FLOATING_UNARY_FUNCTOR(silu, x * detail::sigmoid_of(x))
// max(x, 0) + log1p(exp(-|x|)): never overflows.
FUSOR_FLOATING_UNARY_FUNCTOR(softplus,
                             (x > T(0) ? x : T(0)) + ::cuda::std::log1p(::cuda::std::exp(-::cuda::std::fabs(x))))
FUSOR_FLOATING_UNARY_FUNCTOR(gelu, T(0.5) * x * (T(1) + ::cuda::std::erf(x * T(0.70710678118654752440))))
FUSOR_FLOATING_UNARY_FUNCTOR(gelu_tanh, T(0.5) * x * (T(1) + detail::tanh_of(detail::gelu_tanh_inner(x))))
struct pow {  // a function of real numbers, like FUSOR_FLOATING_UNARY_FUNCTOR's
  static constexpr const char* spelling = "pow";
  static constexpr bool floating = true;
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr auto operator()(T a, T b) const {
    return ::cuda::std::pow(a, b);
  }
};
/// \endcond

namespace detail {
// Derivatives that evaluate their function once (derivative.hpp's rules for
// tanh, sigmoid, silu and gelu_tanh). Written as expressions of the function,
// the rule computes tanh or sigmoid two or three times an element, and a fused
// loop does not share them: GELU's backward pass took 15 ns an element on the
// host against 5 with one tanh.
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T tanh_slope(T x) {
  const T t = tanh_of(x);
  return T(1) - t * t;
}
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T sigmoid_slope(T x) {
  const T s = sigmoid_of(x);
  return s * (T(1) - s);
}
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T silu_slope(T x) {
  const T s = sigmoid_of(x);
  return s * (T(1) + x * (T(1) - s));
}
// 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 c x^2), u = gelu_tanh_inner(x).
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T gelu_tanh_slope(T x) {
  const T t = tanh_of(gelu_tanh_inner(x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(gelu_tanh_k) * (T(1) + T(3 * gelu_tanh_c) * x * x);
}
}  // namespace detail

/// \cond
// The derivatives above, as operations of derivative.hpp's rules.
FUSOR_FLOATING_UNARY_FUNCTOR(tanh_slope, detail::tanh_slope(x))
FUSOR_FLOATING_UNARY_FUNCTOR(sigmoid_slope, detail::sigmoid_slope(x))
FUSOR_FLOATING_UNARY_FUNCTOR(silu_slope, detail::silu_slope(x))
FUSOR_FLOATING_UNARY_FUNCTOR(gelu_tanh_slope, detail::gelu_tanh_slope(x))
/// \endcond

/// The reciprocal square root, 1 / sqrt(x); the GPU's rsqrt instruction in device code.
struct rsqrt {
  static constexpr bool floating = true;  ///< An integer operand computes in float.
  /// 1 / sqrt(x).
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T operator()(T x) const {
#if FUSOR_DEVICE_PASS
    if constexpr (::cuda::std::is_same_v<T, float>) return ::rsqrtf(x);
    if constexpr (::cuda::std::is_same_v<T, double>) return ::rsqrt(x);
#endif
    return T(1) / ::cuda::std::sqrt(x);
  }
};

/// min and max propagate NaN from either side, as torch.minimum / maximum do.
struct minimum {
  /// The smaller of `a` and `b` (`a` on ties), or a NaN operand.
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T operator()(T a, T b) const {
    return a != a ? a : (b != b ? b : (b < a ? b : a));
  }
};
/// The larger operand, propagating NaN from either side like minimum.
struct maximum {
  /// The larger of `a` and `b` (`a` on ties), or a NaN operand.
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T operator()(T a, T b) const {
    return a != a ? a : (b != b ? b : (a < b ? b : a));
  }
};
/// `x` limited to [low, high], propagating NaN.
struct clamp {
  /// minimum(maximum(x, low), high).
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr T operator()(T x, T low, T high) const {
    return minimum{}(maximum{}(x, low), high);
  }
};

#undef FUSOR_BINARY_FUNCTOR
#undef FUSOR_UNARY_FUNCTOR
#undef FUSOR_FLOATING_UNARY_FUNCTOR

}  // namespace fusor::ops
