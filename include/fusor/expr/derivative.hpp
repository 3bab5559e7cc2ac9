// fusor/expr/derivative.hpp — derivatives of elementwise expressions, derived at
// compile time by the chain rule over the tree.
//
//   auto f  = arg<0> * sigmoid(arg<0>);        // written once
//   auto df = derivative(f, arg<0>);           // sigmoid(x) * (1 + x * (1 - sigmoid(x)))
//   assign(dx, substitute(df, x) * dy, ex);    // a fused backward kernel
//
// The result is itself an expression, fused like any other. Zeros and ones are
// types (constant<0>, constant<1>), so products with them vanish at compile time
// and a branch that does not depend on the variable costs nothing. Piecewise
// functions take the usual subgradients: relu'(0) = 0, ties of min/max go to the
// first operand, comparisons and where's condition have derivative 0, and cast
// passes the gradient straight through.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "fusor/expr/functors.hpp"
#include "fusor/expr/node.hpp"
#include "fusor/expr/operators.hpp"

namespace fusor {

namespace detail {
template <class T> inline constexpr bool is_zero_v = std::is_same_v<T, zero>;
template <class T> inline constexpr bool is_one_v = std::is_same_v<T, one>;

template <class A, class B>
auto sum(const A& a, const B& b) {
  if constexpr (is_zero_v<A>) return b;
  else if constexpr (is_zero_v<B>) return a;
  else return make_node_from<ops::plus>(a, b);
}
// The node applying a slope functor (functors.hpp) to an argument.
template <class Slope, class A>
auto slope(const A& a) {
  return make_node_from<Slope>(a);
}
// gelu_tanh'' = (1 - t(u)^2) (u1 - a t(u) u1^2 + 3 k c a^2), with t = tanh,
// u = k (a + c a^3) and u1 = u' = k (1 + 3 c a^2) (k and c: functors.hpp).
template <class A>
auto gelu_tanh_second_derivative(const A& a) {
  constexpr double k = ops::detail::gelu_tanh_k, c = ops::detail::gelu_tanh_c;
  const auto u = k * (a + c * (a * a * a));
  const auto u1 = k * (1 + 3 * c * (a * a));
  return slope<ops::tanh_slope>(u) * (u1 - a * tanh(u) * u1 * u1 + 3 * k * c * (a * a));
}
template <class A, class B>
auto product(const A& a, const B& b) {
  if constexpr (is_zero_v<A> || is_zero_v<B>) return zero{};
  else if constexpr (is_one_v<A>) return b;
  else if constexpr (is_one_v<B>) return a;
  else return make_node_from<ops::multiplies>(a, b);
}
}  // namespace detail

/// `partial<I>(children...)`: the derivative of Op with respect to its I-th argument,
/// as an expression of the arguments.
template <class Op>
struct derivative_rule;

#define FUSOR_DERIVATIVE_1(functor, ...)                                   \
  template <>                                                              \
  struct derivative_rule<ops::functor> {                                   \
    template <std::size_t I, class A>                                      \
    static auto partial([[maybe_unused]] const A& a) {                                      \
      return __VA_ARGS__;                                                  \
    }                                                                      \
  };
#define FUSOR_DERIVATIVE_2(functor, first, second)                         \
  template <>                                                              \
  struct derivative_rule<ops::functor> {                                   \
    template <std::size_t I, class A, class B>                             \
    static auto partial([[maybe_unused]] const A& a, [[maybe_unused]] const B& b) {                          \
      if constexpr (I == 0) return first;                                  \
      else return second;                                                  \
    }                                                                      \
  };

// A reciprocal is 1.0f / x, never 1 / x: over an integer literal (x / 2) or an integer tensor, 1 / x would
// divide in integers and give 0. (A float literal is weak: over a double x it computes in double.)
// Doxygen does not expand these macros: the cond section keeps their invocations out of the API reference.
/// \cond
FUSOR_DERIVATIVE_2(plus, one{}, one{})
FUSOR_DERIVATIVE_2(minus, one{}, constant<-1>{})
FUSOR_DERIVATIVE_2(multiplies, b, a)
FUSOR_DERIVATIVE_2(divides, 1.0f / b, -a / (b * b))
FUSOR_DERIVATIVE_1(negate, constant<-1>{})
FUSOR_DERIVATIVE_1(exp, exp(a))
FUSOR_DERIVATIVE_1(log, 1.0f / a)
FUSOR_DERIVATIVE_1(log1p, 1.0f / (1 + a))
FUSOR_DERIVATIVE_1(tanh, detail::slope<ops::tanh_slope>(a))  // 1 - tanh^2
FUSOR_DERIVATIVE_1(erf, 1.12837916709551257390 * exp(-(a * a)))  // 2 / sqrt(pi)
FUSOR_DERIVATIVE_1(sqrt, 0.5 / sqrt(a))
FUSOR_DERIVATIVE_1(rsqrt, -0.5 * rsqrt(a) / a)
FUSOR_DERIVATIVE_1(abs, where(a > 0, 1, where(a < 0, -1, 0)))
FUSOR_DERIVATIVE_1(sigmoid, detail::slope<ops::sigmoid_slope>(a))  // sigmoid (1 - sigmoid)
FUSOR_DERIVATIVE_1(relu, where(a > 0, 1, 0))
FUSOR_DERIVATIVE_1(silu, detail::slope<ops::silu_slope>(a))  // sigmoid (1 + a (1 - sigmoid))
FUSOR_DERIVATIVE_1(softplus, sigmoid(a))
// Phi(a) + a * phi(a)
FUSOR_DERIVATIVE_1(gelu, 0.5 * (1 + erf(a * 0.70710678118654752440)) + a * 0.39894228040143267794 * exp(-0.5 * (a * a)))
FUSOR_DERIVATIVE_1(gelu_tanh, detail::slope<ops::gelu_tanh_slope>(a))  // functors.hpp's gelu_tanh_slope
// Second derivatives, of the slopes above (t = tanh, s = sigmoid):
// (1 - t^2)' = -2 t (1 - t^2); (s (1 - s))' = s (1 - s) (1 - 2 s);
// silu'' = s (1 - s) (2 + a (1 - 2 s)); gelu_tanh'' is detail::gelu_tanh_second_derivative.
FUSOR_DERIVATIVE_1(tanh_slope, -2 * tanh(a) * detail::slope<ops::tanh_slope>(a))
FUSOR_DERIVATIVE_1(sigmoid_slope, detail::slope<ops::sigmoid_slope>(a) * (1 - 2 * sigmoid(a)))
FUSOR_DERIVATIVE_1(silu_slope, detail::slope<ops::sigmoid_slope>(a) * (2 + a * (1 - 2 * sigmoid(a))))
FUSOR_DERIVATIVE_1(gelu_tanh_slope, detail::gelu_tanh_second_derivative(a))
FUSOR_DERIVATIVE_2(pow, b * pow(a, b - 1), pow(a, b) * log(a))
FUSOR_DERIVATIVE_2(minimum, where(a <= b, 1, 0), where(a <= b, 0, 1))
FUSOR_DERIVATIVE_2(maximum, where(a >= b, 1, 0), where(a >= b, 0, 1))
/// \endcond
#undef FUSOR_DERIVATIVE_1
#undef FUSOR_DERIVATIVE_2

/// Piecewise constant: comparisons and logic.
template <class Op>
  requires std::is_same_v<Op, ops::less> || std::is_same_v<Op, ops::less_equal> ||
           std::is_same_v<Op, ops::greater> || std::is_same_v<Op, ops::greater_equal> ||
           std::is_same_v<Op, ops::equal_to> || std::is_same_v<Op, ops::not_equal_to> ||
           std::is_same_v<Op, ops::logical_and> || std::is_same_v<Op, ops::logical_or> ||
           std::is_same_v<Op, ops::logical_not>
struct derivative_rule<Op> {
  /// Zero, for every argument.
  template <std::size_t I, class... A>
  static zero partial(const A&...) { return {}; }
};

/// where(c, a, b): nothing through the condition, 1 to the branch taken.
template <>
struct derivative_rule<ops::select> {
  /// Zero for the condition (I = 0); where(c, 1, 0) for `a`; where(c, 0, 1) for `b`.
  template <std::size_t I, class C, class A, class B>
  static auto partial(const C& c, const A&, const B&) {
    if constexpr (I == 0) return zero{};
    else if constexpr (I == 1) return where(c, 1, 0);
    else return where(c, 0, 1);
  }
};

/// clamp(x, low, high): the gradient goes to whichever argument the result is.
template <>
struct derivative_rule<ops::clamp> {
  /// For `x`: 1 inside [low, high], else 0; for `low`: 1 where x < low; for `high`: 1 where x > high.
  template <std::size_t I, class X, class L, class H>
  static auto partial(const X& x, const L& low, const H& high) {
    if constexpr (I == 0) return where((x < low) || (x > high), 0, 1);
    else if constexpr (I == 1) return where(x < low, 1, 0);
    else return where(x > high, 1, 0);
  }
};

/// cast passes the gradient straight through.
template <class To>
struct derivative_rule<ops::cast_to<To>> {
  /// One.
  template <std::size_t I, class A>
  static one partial(const A&) { return {}; }
};

/// d e / d arg<K>: the derivative of `e` with respect to placeholder K, as an expression (chain rule, at
/// compile time).
template <expression E, std::size_t K>
auto derivative(const E& e, placeholder<K> variable) {
  if constexpr (std::is_same_v<E, placeholder<K>>) {
    return one{};
  } else if constexpr (is_node_v<E>) {
    using rule = derivative_rule<typename E::operation>;
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      // Chain rule; a child that does not depend on the variable adds nothing.
      auto term = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
        auto inner = derivative(e.template child<J>(), variable);
        if constexpr (detail::is_zero_v<decltype(inner)>)
          return zero{};
        else
          return detail::product(rule::template partial<J>(e.template child<I>()...), inner);
      };
      zero start{};
      return [&](auto acc, auto... terms) {
        auto fold = [&](auto self, auto a, auto first, auto... rest) {
          if constexpr (sizeof...(rest) == 0) return detail::sum(a, first);
          else return self(self, detail::sum(a, first), rest...);
        };
        return fold(fold, acc, terms...);
      }(start, term(std::integral_constant<std::size_t, I>{})...);
    }(std::make_index_sequence<E::arity>{});
  } else {
    return zero{};  // another placeholder, a view, a literal: constant here
  }
}

}  // namespace fusor
