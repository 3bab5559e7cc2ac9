// fusor/optim/state_domain.hpp — which values a piece of optimizer or
// controller state can hold, said by the state's owner where it names the
// state (for_each_state), so that a checkpoint loader refuses a damaged file
// (optim/training_checkpoint.hpp) without knowing any optimizer by name.
//
//   optimizer.for_each_state([](const char* name, const auto& state) { ... });         // names and views
//   optimizer.for_each_state([](const char* name, const auto& state, state_domain d) { ... });  // and domains
#pragma once

#include <type_traits>

namespace fusor::optim {

/// The values a piece of state can hold; a trainer never saves others.
enum class state_domain {
  finite,        ///< any finite number (first moments, momentum, master weights)
  non_negative,  ///< finite and 0 or more (AdamW's mean of squared gradients)
  positive,      ///< finite and above 0 (the loss scale)
  step_count,    ///< a count of steps: 0 to the steps taken (the step, the clean steps)
  zero_or_one,   ///< exactly 0 or 1 (a pruning mask)
};

/// The domain in words, for an error ("... is 0, where its values are finite and above 0").
constexpr const char* describe(state_domain d) {
  switch (d) {
    case state_domain::finite: return "finite";
    case state_domain::non_negative: return "finite and 0 or more";
    case state_domain::positive: return "finite and above 0";
    case state_domain::step_count: return "a step count, 0 to the steps taken";
    case state_domain::zero_or_one: return "0 or 1";
  }
  return "?";
}

namespace detail {
// What for_each_state calls: fn(name, view, domain) where fn takes the domain, else fn(name, view).
template <class Fn, class Name, class View>
void visit_state(Fn& fn, const Name& name, const View& state, state_domain domain) {
  if constexpr (std::is_invocable_v<Fn&, const Name&, const View&, state_domain>) fn(name, state, domain);
  else fn(name, state);
}
}  // namespace detail

}  // namespace fusor::optim
