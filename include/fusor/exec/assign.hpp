// fusor/exec/assign.hpp — assignment: evaluate expressions into destinations in
// exactly one pass (one kernel launch, one host loop).
//
//   assign(y, x * 2 + b);                          // host executor
//   assign(y, gelu(x), fusor::cuda_executor{s});   // one kernel on stream s
//   assign_many(ex, out(p, p - lr * m), out(m, beta * m + g));  // one pass, two outputs
#pragma once

#include <type_traits>
#include <utility>

#include "fusor/exec/host.hpp"
#include "fusor/exec/pass.hpp"

namespace fusor {

/// Evaluates every target, out(destination, expression), in one pass on `executor`: one kernel launch or one
/// host loop. Throws shape_error when shapes disagree; operands must be in memory the executor can access.
template <class Executor, class... Targets>
void assign_many(const Executor& executor, const Targets&... targets) {
  static_assert(sizeof...(Targets) > 0, "fusor: assign_many needs at least one out(destination, expression)");
  static_assert((Executor::template can_run<Targets> && ...), FUSOR_MEMORY_SPACE_MESSAGE);
  static_assert((!detail::has_placeholder_v<typename Targets::expression_type> && ...), FUSOR_PLACEHOLDER_MESSAGE);
  static_assert(assignment_checks<Executor, Targets...>::shapes::value, FUSOR_STATIC_FIT_MESSAGE);
  // After a failed check, nothing deeper is instantiated: one error, not a cascade.
  if constexpr (assignment_checks<Executor, Targets...>::ok) {
    const auto [p, plan] = make_pass(targets...);
    executor.run(p, plan);
  }
}

/// Evaluates `expression` into `destination` (a view or a tensor) in one pass on `executor`, the host by
/// default; throws shape_error when the expression's shape does not fit the destination's.
template <class Destination, class Expression, class Executor = host_executor>
void assign(Destination&& destination, Expression&& expression, const Executor& executor = {}) {
  const auto t = out(std::forward<Destination>(destination), std::forward<Expression>(expression));
  using T = std::remove_const_t<decltype(t)>;
  // assign_many's checks, here: the first function the caller called is where the message points.
  static_assert(Executor::template can_run<T>, FUSOR_MEMORY_SPACE_MESSAGE);
  static_assert(!detail::has_placeholder_v<typename T::expression_type>, FUSOR_PLACEHOLDER_MESSAGE);
  static_assert(static_fit_check<typename T::destination_type::extents_type,
                                 typename T::expression_type::extents_type>::value,
                FUSOR_STATIC_FIT_MESSAGE);
  if constexpr (assignment_checks<Executor, T>::ok) assign_many(executor, t);
}

}  // namespace fusor
