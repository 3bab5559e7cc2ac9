// fusor/graph/host_effects.hpp — host-side bookkeeping that a replayed CUDA
// graph must repeat.
//
// A captured step records device work only: host code inside it (a trainer's
// step counter, for one) runs once, at capture, and never again. Code that keeps
// such a counter writes the change as a host effect:
//
//   graph::host_effect([this] { ++steps_; });
//
// Outside a capture the effect runs at once. While a step is being captured on
// this thread (graph::captured_step), it is recorded instead, and every replay
// runs it: after capture + n replays the counter has moved n times, as it would
// have after n eager steps. Plain C++, so the rule is tested on the host too.
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace fusor::graph {

/// The effects recorded while one step was captured, in the order they were made.
class host_effect_record {
 public:
  /// Appends `effect` to the record.
  void add(std::function<void()> effect) { effects_.push_back(std::move(effect)); }
  /// Runs every recorded effect once, in the order they were recorded.
  void replay() const {
    for (const auto& effect : effects_) effect();
  }
  /// How many effects are recorded.
  std::size_t size() const { return effects_.size(); }
  /// Drops every recorded effect.
  void clear() { effects_.clear(); }

 private:
  std::vector<std::function<void()>> effects_;
};

namespace detail {
// The record of the capture under way on this thread (null: none).
inline host_effect_record*& recording_host_effects() {
  thread_local host_effect_record* record = nullptr;
  return record;
}
}  // namespace detail

/// Records host effects into `record` while it lives (a capture on this thread).
class recording_host_effects {
 public:
  /// Makes `record` this thread's recording until destruction, which restores the previous one.
  explicit recording_host_effects(host_effect_record& record)
      : previous_(std::exchange(detail::recording_host_effects(), &record)) {}
  recording_host_effects(const recording_host_effects&) = delete;
  recording_host_effects& operator=(const recording_host_effects&) = delete;
  ~recording_host_effects() { detail::recording_host_effects() = previous_; }

 private:
  host_effect_record* previous_;
};

/// Runs `effect` now, or, while a step is being captured on this thread, at
/// every replay of it instead.
template <class Effect>
void host_effect(Effect&& effect) {
  if (host_effect_record* record = detail::recording_host_effects())
    record->add(std::function<void()>(std::forward<Effect>(effect)));
  else
    effect();
}

/// Whether a step is being captured on this thread, so host effects are recorded rather than run.
inline bool recording_host_effects_now() { return detail::recording_host_effects() != nullptr; }

}  // namespace fusor::graph
