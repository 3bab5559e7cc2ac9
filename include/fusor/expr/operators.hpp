// fusor/expr/operators.hpp — the user-facing spelling of expressions: arithmetic
// and comparison operators, where, cast and the math a network needs.
//
// Every function takes views, lvalue tensors, other expressions and scalars,
// and returns a node: nothing is evaluated until an assignment.
#pragma once

#include <type_traits>
#include <utility>

#include "fusor/expr/functors.hpp"
#include "fusor/expr/node.hpp"

namespace fusor {

/// At least one side must be part of a tree: `2 + 3` stays plain arithmetic.
template <class A, class B>
concept binary_operands = operand<A> && operand<B> && (tree_operand<A> || tree_operand<B>);

#define FUSOR_BINARY_OPERATOR(symbol, functor)                 \
  template <class A, class B>                                  \
    requires binary_operands<A, B>                             \
  auto operator symbol(A&& a, B&& b) {                         \
    return make_node<functor>(std::forward<A>(a), std::forward<B>(b)); \
  }
// Doxygen does not expand these macros: the cond section keeps their invocations out of the API reference.
/// \cond
FUSOR_BINARY_OPERATOR(+, ops::plus)
FUSOR_BINARY_OPERATOR(-, ops::minus)
FUSOR_BINARY_OPERATOR(*, ops::multiplies)
FUSOR_BINARY_OPERATOR(/, ops::divides)
FUSOR_BINARY_OPERATOR(<, ops::less)
FUSOR_BINARY_OPERATOR(<=, ops::less_equal)
FUSOR_BINARY_OPERATOR(>, ops::greater)
FUSOR_BINARY_OPERATOR(>=, ops::greater_equal)
FUSOR_BINARY_OPERATOR(==, ops::equal_to)
FUSOR_BINARY_OPERATOR(!=, ops::not_equal_to)
FUSOR_BINARY_OPERATOR(&&, ops::logical_and)
FUSOR_BINARY_OPERATOR(||, ops::logical_or)
/// \endcond
#undef FUSOR_BINARY_OPERATOR

/// Elementwise negation, -a.
template <tree_operand A>
auto operator-(A&& a) {
  return make_node<ops::negate>(std::forward<A>(a));
}
/// Elementwise logical not: true where `a` is zero.
template <tree_operand A>
auto operator!(A&& a) {
  return make_node<ops::logical_not>(std::forward<A>(a));
}

#define FUSOR_UNARY_FUNCTION(name)                  \
  template <tree_operand A>                         \
  auto name(A&& a) {                                \
    return make_node<ops::name>(std::forward<A>(a)); \
  }
/// \cond
FUSOR_UNARY_FUNCTION(exp)
FUSOR_UNARY_FUNCTION(log)
FUSOR_UNARY_FUNCTION(log1p)
FUSOR_UNARY_FUNCTION(tanh)
FUSOR_UNARY_FUNCTION(erf)
FUSOR_UNARY_FUNCTION(sqrt)
FUSOR_UNARY_FUNCTION(rsqrt)
FUSOR_UNARY_FUNCTION(abs)
FUSOR_UNARY_FUNCTION(sigmoid)
FUSOR_UNARY_FUNCTION(relu)
FUSOR_UNARY_FUNCTION(silu)
FUSOR_UNARY_FUNCTION(softplus)
FUSOR_UNARY_FUNCTION(gelu)       // exact: x * Phi(x), with erf
FUSOR_UNARY_FUNCTION(gelu_tanh)  // the tanh approximation
/// \endcond
#undef FUSOR_UNARY_FUNCTION

#define FUSOR_BINARY_FUNCTION(name, functor)                           \
  template <class A, class B>                                          \
    requires binary_operands<A, B>                                     \
  auto name(A&& a, B&& b) {                                            \
    return make_node<functor>(std::forward<A>(a), std::forward<B>(b)); \
  }
/// \cond
FUSOR_BINARY_FUNCTION(pow, ops::pow)
FUSOR_BINARY_FUNCTION(min, ops::minimum)
FUSOR_BINARY_FUNCTION(max, ops::maximum)
/// \endcond
#undef FUSOR_BINARY_FUNCTION

/// clamp(x, low, high) = min(max(x, low), high).
template <class X, class L, class H>
  requires operand<X> && operand<L> && operand<H> && (tree_operand<X> || tree_operand<L> || tree_operand<H>)
auto clamp(X&& x, L&& low, H&& high) {
  return make_node<ops::clamp>(std::forward<X>(x), std::forward<L>(low), std::forward<H>(high));
}

/// where(condition, a, b): a where condition holds, else b.
template <class C, class A, class B>
  requires operand<C> && operand<A> && operand<B> && (tree_operand<C> || tree_operand<A> || tree_operand<B>)
auto where(C&& condition, A&& a, B&& b) {
  return make_node<ops::select>(std::forward<C>(condition), std::forward<A>(a), std::forward<B>(b));
}

/// cast<T>(x): rounds x to T (a type or a precision policy) and goes on in T's
/// compute type; cast<bf16>(x) on floats keeps bf16's precision in fp32 registers.
template <class To, tree_operand A>
auto cast(A&& a) {
  return make_node<ops::cast_to<To>>(std::forward<A>(a));
}

}  // namespace fusor
