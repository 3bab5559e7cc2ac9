// fusor/comm/nccl_watchdog.hpp — how fusor waits for NCCL: never forever.
//
// A failed or hung rank would otherwise hang every other rank in a collective
// until the job's wall-clock limit. Each point where fusor blocks on NCCL (a
// request's wait(), the end of a group(), making and finalizing a communicator)
// polls instead: a query says pending, done or failed; between polls the thread
// yields, then sleeps a growing pause; on a failure, or once the timeout has
// passed, the communicator is aborted and nccl_error names the call (with its
// element count and type), the rank, the peer ("all ranks" for a collective)
// and how long it waited.
//
// The timeout of a communicator: nccl_options::timeout if given, else the
// environment variable FUSOR_NCCL_TIMEOUT_S (seconds, > 0, decimals allowed),
// else 10 minutes.
//
// Plain C++ (no CUDA, no NCCL; polling and pauses are comm/poll.hpp's), so the
// policy is tested on the host with a fake clock
// (tests/comm/test_nccl_watchdog.cpp); comm/nccl_request.hpp gives it
// cudaEventQuery + ncclCommGetAsyncError as the query and ncclCommAbort as the abort.
#pragma once

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "fusor/comm/poll.hpp"
#include "fusor/core/error.hpp"

namespace fusor::comm {

/// An NCCL or CUDA call of the NCCL communicator failed, or waiting for one timed out.
struct nccl_error : error {
  using error::error;
};

/// The timeout when neither nccl_options nor FUSOR_NCCL_TIMEOUT_S sets one: 10 minutes.
inline constexpr seconds_d default_nccl_timeout{600.0};
/// The environment variable that sets the NCCL wait timeout, in seconds.
inline constexpr const char* nccl_timeout_variable = "FUSOR_NCCL_TIMEOUT_S";

/// A communicator's timeout: `option` if given, else `environment` (the value of
/// FUSOR_NCCL_TIMEOUT_S, null when unset), else default_nccl_timeout. A value
/// that is not a finite number of seconds above 0 is an error naming it.
inline seconds_d resolve_nccl_timeout(std::optional<seconds_d> option, const char* environment) {
  return resolve_timeout(option, environment, default_nccl_timeout, nccl_timeout_variable, "fusor::comm::nccl");
}
/// resolve_nccl_timeout() with this process's FUSOR_NCCL_TIMEOUT_S.
inline seconds_d nccl_timeout_from_environment(std::optional<seconds_d> option = {}) {
  return resolve_nccl_timeout(option, std::getenv(nccl_timeout_variable));
}

/// What a blocking point waits for, as its messages name it.
struct nccl_operation {
  std::string call;  ///< "ncclAllReduce (4099 x bfloat16, sum)", "ncclGroupEnd", ...
  int rank = 0;  ///< The rank that waits.
  int peer = -1;  ///< The other rank of a send or recv; -1: every rank of the communicator
};

/// The operation as messages name it: "ncclGroupEnd on rank 3, all ranks", "... on rank 0, peer 1".
inline std::string describe(const nccl_operation& op) {
  return op.call + " on rank " + std::to_string(op.rank) +
         (op.peer < 0 ? std::string(", all ranks") : ", peer " + std::to_string(op.peer));
}

/// The message of a wait that failed (`reason` not empty) or timed out (`reason` empty).
inline std::string nccl_wait_message(const nccl_operation& op, seconds_d waited, seconds_d timeout,
                                     const std::string& reason) {
  std::string message = "fusor::comm::nccl: " + describe(op);
  if (reason.empty())
    message += ": not complete after waiting " + seconds_text(waited) + " (the timeout is " + seconds_text(timeout) +
               "; set it with " + nccl_timeout_variable +
               " or nccl_options::timeout): a rank may have failed or hung, or the ranks issued different calls";
  else
    message += ": failed after waiting " + seconds_text(waited) + ": " + reason;
  return message + "; the communicator was aborted (ncclCommAbort)";
}

/// Waits for one operation under a timeout. `query()` returns a poll_status;
/// `abort(message)` is called once, before nccl_error(message) is thrown, when
/// the query fails or the timeout passes.
template <class Now = steady_now, class Pause = thread_pause>
class nccl_watchdog {
 public:
  /// Gives up after `timeout`; `now` reads the clock and `pause` waits between polls (tests pass fakes).
  explicit nccl_watchdog(seconds_d timeout, Now now = {}, Pause pause = {})
      : timeout_(timeout), now_(std::move(now)), pause_(std::move(pause)) {}

  /// How long wait() polls before it gives up.
  seconds_d timeout() const { return timeout_; }

  /// Polls `query` until it is done (pausing by poll_pause()); a failure or the timeout calls `abort` and
  /// throws nccl_error naming `op`.
  template <class Query, class Abort>
  void wait(const nccl_operation& op, Query&& query, Abort&& abort) {
    const std::chrono::nanoseconds start = now_();
    for (std::size_t poll = 0;; ++poll) {
      const poll_status status = query();
      if (status.value == poll_status::state::done) return;
      const seconds_d waited = now_() - start;
      if (status.value == poll_status::state::failed) fail(op, waited, status.reason, abort);
      if (waited >= timeout_) fail(op, waited, {}, abort);
      pause_(poll_pause(poll));
    }
  }
  /// One poll, no waiting (a request's test()): whether it is done; a failure
  /// aborts and throws as wait() does.
  template <class Query, class Abort>
  bool check(const nccl_operation& op, Query&& query, Abort&& abort) {
    const poll_status status = query();
    if (status.value == poll_status::state::failed) fail(op, seconds_d(0), status.reason, abort);
    return status.value == poll_status::state::done;
  }

 private:
  template <class Abort>
  [[noreturn]] void fail(const nccl_operation& op, seconds_d waited, const std::string& reason, Abort& abort) {
    const std::string message = nccl_wait_message(op, waited, timeout_, reason);
    abort(message);
    throw nccl_error(message);
  }

  seconds_d timeout_;
  Now now_;
  Pause pause_;
};

}  // namespace fusor::comm
