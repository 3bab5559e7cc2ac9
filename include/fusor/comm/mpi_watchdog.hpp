// fusor/comm/mpi_watchdog.hpp — how the MPI communicator waits: never forever,
// and (when asked) never in a collective the other ranks did not call.
//
// Hangs. Every collective of a communicator has a sequence number (1, 2, ...,
// the same on every rank when the ranks call the same collectives). A wait
// polls MPI_Test (comm/poll.hpp's pauses); once the timeout has passed it reads
// every rank's progress board — the number of the last collective each rank
// has entered, published in a one-sided MPI window that its owner updates with
// a local store — and throws mpi_timeout_error naming the collective, its
// number, how long it waited and the ranks that did not arrive (or did not
// answer the read). The request cannot be cancelled, so the job must end:
// comm::run_ranks prints the error and calls MPI_Abort, which ends every rank.
// The timeout: mpi_options::timeout, else FUSOR_MPI_TIMEOUT_S (seconds, > 0),
// else 10 minutes.
//
// Diverging ranks. With the collective check on (mpi_options::check_collectives,
// else FUSOR_MPI_CHECK_COLLECTIVES=0/1, else on in builds without NDEBUG),
// every rank gathers what every other is about to call (call, element count
// and type, operation, root, sequence number: 48 bytes a rank) before each
// collective; a difference throws mpi_mismatch_error on every rank, naming
// the first rank that differs from rank 0 and both calls.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "fusor/comm/mpi_error.hpp"
#include "fusor/comm/poll.hpp"

namespace fusor::comm {

// Waiting for a collective timed out (the message names it and the missing ranks).
struct mpi_timeout_error : mpi_error {
  using mpi_error::mpi_error;
};
// The ranks are about to call different collectives, or the same one with different sizes.
struct mpi_mismatch_error : mpi_error {
  using mpi_error::mpi_error;
};

struct mpi_options {
  std::optional<seconds_d> timeout{};       // else FUSOR_MPI_TIMEOUT_S, else default_mpi_timeout
  std::optional<bool> check_collectives{};  // else FUSOR_MPI_CHECK_COLLECTIVES, else on without NDEBUG
};

inline constexpr seconds_d default_mpi_timeout{600.0};
inline constexpr const char* mpi_timeout_variable = "FUSOR_MPI_TIMEOUT_S";
inline constexpr const char* mpi_check_variable = "FUSOR_MPI_CHECK_COLLECTIVES";

inline seconds_d resolve_mpi_timeout(std::optional<seconds_d> option, const char* environment) {
  return resolve_timeout(option, environment, default_mpi_timeout, mpi_timeout_variable, "fusor::comm::mpi");
}
inline bool resolve_mpi_check(std::optional<bool> option, const char* environment) {
  if (option) return *option;
  if (environment != nullptr && *environment != '\0') {
    const std::string v = environment;
    if (v == "1" || v == "on" || v == "true") return true;
    if (v == "0" || v == "off" || v == "false") return false;
    throw error(std::string("fusor::comm::mpi: ") + mpi_check_variable + "=\"" + v + "\" is not 0 or 1");
  }
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

// One collective as the check compares it and the messages name it.
struct mpi_call {
  enum kind : std::int64_t { none = 0, all_reduce, reduce_scatter, all_gather, broadcast, reduce };
  std::int64_t what = none;
  std::int64_t count = 0;      // elements this rank passes (send's for reductions)
  std::int64_t type = 0;       // detail::element_code
  std::int64_t op = -1;        // reduction_op, -1: none
  std::int64_t root = -1;      // broadcast and reduce
  std::int64_t sequence = 0;   // 1, 2, ... per communicator
  bool operator==(const mpi_call&) const = default;
};

namespace detail {
template <class T>
constexpr std::int64_t element_code() {
  if constexpr (std::is_same_v<T, float>) return 1;
  else if constexpr (std::is_same_v<T, double>) return 2;
  else if constexpr (std::is_same_v<T, bfloat16>) return 3;
  else if constexpr (std::is_same_v<T, float16>) return 4;
  else if constexpr (std::is_same_v<T, std::int8_t>) return 5;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return 6;
  else if constexpr (std::is_same_v<T, std::int32_t>) return 7;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return 8;
  else if constexpr (std::is_same_v<T, std::int64_t>) return 9;
  else return 0;
}
inline const char* element_name(std::int64_t code) {
  constexpr const char* names[] = {"?", "float", "double", "bfloat16", "float16", "int8", "uint8", "int32", "uint32", "int64"};
  return code >= 0 && code < 10 ? names[code] : "?";
}
inline const char* call_name(std::int64_t what) {
  constexpr const char* names[] = {"(no collective)", "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"};
  return what >= 0 && what < 6 ? names[what] : "?";
}
inline const char* op_name(std::int64_t op) {
  constexpr const char* names[] = {"sum", "avg", "max"};
  return op >= 0 && op < 3 ? names[op] : "";
}
}  // namespace detail

// "all_reduce #17 (1024 x float, sum)", "broadcast #3 (10 x int32, root 0)".
inline std::string describe(const mpi_call& c) {
  std::string s = std::string(detail::call_name(c.what)) + " #" + std::to_string(c.sequence) + " (" +
                  std::to_string(c.count) + " x " + detail::element_name(c.type);
  if (c.op >= 0) s += std::string(", ") + detail::op_name(c.op);
  if (c.root >= 0) s += ", root " + std::to_string(c.root);
  return s + ")";
}

// The first rank whose call differs from rank 0's, as an error message; empty when all agree.
inline std::string mismatch_message(const std::vector<mpi_call>& calls) {
  for (std::size_t r = 1; r < calls.size(); ++r)
    if (!(calls[r] == calls[0]))
      return "fusor::comm::mpi: the ranks are about to call different collectives: rank 0 calls " +
             describe(calls[0]) + ", rank " + std::to_string(r) + " calls " + describe(calls[r]) +
             " (found by the collective check, " + mpi_check_variable + ")";
  return {};
}

// The ranks that did not arrive at collective `sequence`, from the board's
// entries (-1: the rank did not answer); empty when every rank arrived.
inline std::string missing_ranks(const std::vector<std::int64_t>& entered, std::int64_t sequence) {
  std::string late, silent;
  for (std::size_t r = 0; r < entered.size(); ++r) {
    if (entered[r] < 0) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    else if (entered[r] < sequence)
      late += (late.empty() ? "" : ", ") + std::to_string(r) + " (last entered #" + std::to_string(entered[r]) + ")";
  }
  std::string s;
  if (!late.empty()) s = "ranks that did not arrive: " + late;
  if (!silent.empty()) s += (s.empty() ? "" : "; ") + std::string("ranks that did not answer: ") + silent;
  return s.empty() ? "every rank arrived (the collective itself is stuck)" : s;
}

// The progress board: one int64 a rank, in an MPI window. The owner stores the
// number of each collective it enters into its own entry (a local store, no
// message); a rank whose wait timed out reads every entry (MPI_Rget), giving
// each read a few seconds.
class mpi_progress_board {
 public:
  mpi_progress_board() = default;
  mpi_progress_board(const mpi_progress_board&) = delete;
  mpi_progress_board& operator=(const mpi_progress_board&) = delete;
  // Collective (MPI_Win_allocate): every rank of `comm` at once.
  void open(MPI_Comm comm) {
    MPI_Comm_size(comm, &size_);
    detail::mpi_check(MPI_Win_allocate(sizeof(std::int64_t), sizeof(std::int64_t), MPI_INFO_NULL, comm, &entry_, &window_),
              "MPI_Win_allocate");
    *entry_ = 0;
    detail::mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_), "MPI_Win_lock_all");
  }
  // Collective (MPI_Win_free): call while every rank is still in step.
  void free() {
    if (window_ == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }

  void enter(std::int64_t sequence) {
    if (window_ == MPI_WIN_NULL) return;
    *static_cast<volatile std::int64_t*>(entry_) = sequence;
    MPI_Win_sync(window_);
  }
  // Every rank's entry; -1 for a rank that did not answer within `patience`.
  std::vector<std::int64_t> read(seconds_d patience) const {
    std::vector<std::int64_t> entered(static_cast<std::size_t>(size_), -1);
    if (window_ == MPI_WIN_NULL) return entered;
    std::vector<MPI_Request> reads(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r)
      if (MPI_Rget(&entered[std::size_t(r)], 1, MPI_INT64_T, r, 0, 1, MPI_INT64_T, window_, &reads[std::size_t(r)]) !=
          MPI_SUCCESS)
        reads[std::size_t(r)] = MPI_REQUEST_NULL;
    std::vector<bool> answered(static_cast<std::size_t>(size_), false);
    const auto start = steady_now{}();
    for (std::size_t poll = 0; seconds_d(steady_now{}() - start) < patience; ++poll) {
      bool all = true;
      for (int r = 0; r < size_; ++r) {
        if (answered[std::size_t(r)] || reads[std::size_t(r)] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&reads[std::size_t(r)], &done, MPI_STATUS_IGNORE);
        answered[std::size_t(r)] = done != 0;
        all = all && done;
      }
      if (all) break;
      thread_pause{}(poll_pause(poll));
    }
    for (int r = 0; r < size_; ++r)
      if (!answered[std::size_t(r)]) entered[std::size_t(r)] = -1;  // a read still in flight is abandoned
    return entered;
  }

 private:
  int size_ = 1;
  std::int64_t* entry_ = nullptr;
  MPI_Win window_ = MPI_WIN_NULL;
};

// What a communicator's waits share: the timeout, the board, and the rank.
struct mpi_watch {
  seconds_d timeout = default_mpi_timeout;
  bool check_collectives = false;
  int rank = 0;
  mpi_progress_board board;
};

// The message of a wait that timed out.
inline std::string mpi_timeout_message(const std::string& call, int rank, seconds_d waited, const mpi_watch& watch,
                                       const std::string& missing) {
  return "fusor::comm::mpi: " + call + " on rank " + std::to_string(rank) + ": not complete after waiting " +
         seconds_text(waited) + " (the timeout is " + seconds_text(watch.timeout) + "; set it with " +
         mpi_timeout_variable + " or mpi_options::timeout)" + (missing.empty() ? std::string() : "; " + missing) +
         "; the job must end (MPI_Abort): the collective cannot be cancelled";
}

// Waits for `request` under the watch's timeout; on timeout the request is
// abandoned (set to null) and mpi_timeout_error thrown. `sequence` > 0 for a
// collective (the board names the ranks that did not arrive), 0 for a message.
inline void wait_watched(MPI_Request& request, const mpi_watch& watch, const std::string& call, std::int64_t sequence) {
  const auto start = steady_now{}();
  for (std::size_t poll = 0;; ++poll) {
    int done = 0;
    detail::mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call.c_str());
    if (done) return;
    const seconds_d waited = steady_now{}() - start;
    if (waited >= watch.timeout) {
      const std::string missing = sequence > 0 ? missing_ranks(watch.board.read(seconds_d(2.0)), sequence) : "";
      request = MPI_REQUEST_NULL;  // abandoned: MPI keeps it until the job ends
      throw mpi_timeout_error(mpi_timeout_message(call, watch.rank, waited, watch, missing));
    }
    thread_pause{}(poll_pause(poll));
  }
}

}  // namespace fusor::comm
