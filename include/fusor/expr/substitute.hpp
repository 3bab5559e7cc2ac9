// fusor/expr/substitute.hpp — replacing placeholders (arg<N>) by operands.
//
// A symbolic expression such as `arg<0> * sigmoid(arg<0>)` says what to compute
// without saying on what; substitute(e, x) applies it to x (a view, a tensor or
// a scalar), giving an ordinary expression ready to assign or evaluate.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "fusor/expr/node.hpp"

namespace fusor {

namespace detail {
template <class E, class Operands>
auto substitute_tuple(const E& e, const Operands& operands) {
  if constexpr (requires { E::index; } && std::is_same_v<typename E::value_type, unbound>) {
    static_assert(E::index < std::tuple_size_v<Operands>,
                  "fusor: substitute() was given fewer operands than the expression has placeholders");
    return std::get<E::index>(operands);
  } else if constexpr (is_node_v<E>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return make_node_from<typename E::operation>(substitute_tuple(e.template child<I>(), operands)...);
    }(std::make_index_sequence<E::arity>{});
  } else {
    return e;
  }
}
}  // namespace detail

/// substitute(e, a0, a1, ...): arg<0> becomes a0, arg<1> becomes a1, ...
template <expression E, class... Operands>
auto substitute(const E& e, Operands&&... operands) {
  return detail::substitute_tuple(e, std::make_tuple(as_expression(std::forward<Operands>(operands))...));
}

/// The value of an expression without extents (scalars only), computed on the host.
template <expression E>
auto evaluate_scalar(const E& e) {
  static_assert(E::extents_type::rank() == 0, "fusor: evaluate_scalar is for expressions of scalars only");
  return e.at(::cuda::std::array<index_t, 0>{});
}

}  // namespace fusor
