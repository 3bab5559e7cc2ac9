// fusor/exec/assign.hpp — assignment: evaluate expressions into destinations in
// exactly one pass (one kernel launch, one host loop).
//
//   assign(y, x * 2 + b);                          // host executor
//   assign(y, gelu(x), fusor::cuda_executor{s});   // one kernel on stream s
//   assign_many(ex, out(p, p - lr * m), out(m, beta * m + g));  // one pass, two outputs
#pragma once

#include <utility>

#include "fusor/exec/host.hpp"
#include "fusor/exec/pass.hpp"

namespace fusor {

/// Evaluates every target, out(destination, expression), in one pass on `executor`: one kernel launch or one
/// host loop. Throws shape_error when shapes disagree; operands must be in memory the executor can access.
template <class Executor, class... Targets>
void assign_many(const Executor& executor, const Targets&... targets) {
  static_assert(sizeof...(Targets) > 0, "fusor: assign_many needs at least one out(destination, expression)");
  static_assert((Executor::template can_run<Targets> && ...),
                "fusor: an operand lives in a memory space this executor cannot read or write "
                "(host memory on the cuda executor, or device memory on the host executor)");
  const auto [p, plan] = make_pass(targets...);
  executor.run(p, plan);
}

/// Evaluates `expression` into `destination` (a view or a tensor) in one pass on `executor`, the host by
/// default; throws shape_error when the expression's shape does not fit the destination's.
template <class Destination, class Expression, class Executor = host_executor>
void assign(Destination&& destination, Expression&& expression, const Executor& executor = {}) {
  assign_many(executor, out(std::forward<Destination>(destination), std::forward<Expression>(expression)));
}

}  // namespace fusor
