// fusor/comm/poll.hpp — waiting by polling, shared by the communicators that
// never wait forever (comm/nccl_watchdog.hpp, comm/mpi_watchdog.hpp): what a
// poll finds, the pause between polls, the clock, and timeouts read from an
// option or an environment variable.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "fusor/core/error.hpp"

namespace fusor::comm {

/// A duration in seconds, as a double: the unit of every timeout.
using seconds_d = std::chrono::duration<double>;

/// "12.3 s", to a tenth of a second (a timeout of 0.25 s shows as 0.25 s).
inline std::string seconds_text(seconds_d s) {
  char text[48];
  const double v = s.count();
  std::snprintf(text, sizeof text, v < 1.0 ? "%.3g s" : "%.1f s", v);
  return text;
}

/// What one poll found.
struct poll_status {
  /// Not finished yet, finished, or failed.
  enum class state { pending, done, failed };
  state value = state::pending;  ///< What the poll found.
  std::string reason;  ///< When failed: what failed

  /// Not finished yet.
  static poll_status pending() { return {}; }
  /// Finished.
  static poll_status done() { return {state::done, {}}; }
  /// Failed, for the reason `why`.
  static poll_status failed(std::string why) { return {state::failed, std::move(why)}; }
};

/// The pause before poll number `poll` (from 0): none (a yield) for the first
/// polls, which catch short waits at once, then 50 us doubling up to 2 ms, so a
/// long wait costs little CPU and ends at most 2 ms after its work did.
inline std::chrono::nanoseconds poll_pause(std::size_t poll) {
  using namespace std::chrono_literals;
  constexpr std::size_t yields = 64;
  if (poll < yields) return 0ns;
  const std::size_t doublings = std::min<std::size_t>(poll - yields, 6);
  return std::min<std::chrono::nanoseconds>(50us * (std::size_t{1} << doublings), 2ms);
}

/// The real clock; tests pass fakes.
struct steady_now {
  /// The steady clock's time since its epoch.
  std::chrono::nanoseconds operator()() const { return std::chrono::steady_clock::now().time_since_epoch(); }
};
/// The real pause; tests pass fakes.
struct thread_pause {
  /// Yields the thread for a pause of 0, else sleeps for `pause`.
  void operator()(std::chrono::nanoseconds pause) const {
    if (pause.count() == 0) std::this_thread::yield();
    else std::this_thread::sleep_for(pause);
  }
};

/// A timeout: `option` if given, else `environment` (an environment variable's
/// value, null when unset), else `fallback`. A value that is not a finite number
/// of seconds above 0 is an error naming it; `who` ("fusor::comm::nccl") starts it.
inline seconds_d resolve_timeout(std::optional<seconds_d> option, const char* environment, seconds_d fallback,
                                 const char* variable, const char* who) {
  if (option) {
    if (!(option->count() > 0) || !std::isfinite(option->count()))
      throw error(std::string(who) + ": the timeout option is " + std::to_string(option->count()) +
                  " s; it must be a finite number of seconds above 0");
    return *option;
  }
  if (environment == nullptr || *environment == '\0') return fallback;
  char* end = nullptr;
  const double seconds = std::strtod(environment, &end);
  if (end == environment || *end != '\0' || !std::isfinite(seconds) || !(seconds > 0))
    throw error(std::string(who) + ": " + variable + "=\"" + environment +
                "\" is not a number of seconds above 0 (for example 600, or 0.5)");
  return seconds_d(seconds);
}

}  // namespace fusor::comm
