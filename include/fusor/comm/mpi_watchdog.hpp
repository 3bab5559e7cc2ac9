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
// else FUSOR_MPI_CHECK_COLLECTIVES=0/1, else on), every rank gathers what
// every other is about to call (call, element count and type, operation, root,
// sequence number: 48 bytes a rank) before each collective; a difference
// throws mpi_mismatch_error on every rank, naming the first rank that differs
// from rank 0 and both calls. The same check measures each message before its
// recv's buffer is given to MPI (comm/mpi_receives.hpp): a send and recv of
// different sizes throw mpi_mismatch_error on the receiving rank. It is on by
// default in every build: without it, a rank that receives a longer message
// than its buffer gets MPI_ERR_TRUNCATE (mpi_error names the call and suggests
// the check, test_request), but Open MPI has by then written the rest of the
// message past the buffer's end, so memory may be corrupt first; a shorter
// message leaves the rest of the buffer as it was, without an error. Turn it
// off only for a job known to be in step.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fusor/comm/mpi_error.hpp"
#include "fusor/comm/mpi_receives.hpp"
#include "fusor/comm/poll.hpp"

namespace fusor::comm {

/// Waiting for a collective timed out (the message names it and the missing ranks).
struct mpi_timeout_error : mpi_error {
  using mpi_error::mpi_error;
};

/// How an MPI communicator waits: its timeout and whether it checks collectives; empty fields fall back
/// to the environment, then to the defaults.
struct mpi_options {
  /// How long a wait may take; else FUSOR_MPI_TIMEOUT_S, else default_mpi_timeout.
  std::optional<seconds_d> timeout{};
  /// Whether to check each collective against the other ranks'; else FUSOR_MPI_CHECK_COLLECTIVES, else on.
  std::optional<bool> check_collectives{};
};

/// The timeout when neither mpi_options nor FUSOR_MPI_TIMEOUT_S sets one: 10 minutes.
inline constexpr seconds_d default_mpi_timeout{600.0};
/// The environment variable that sets the MPI wait timeout, in seconds.
inline constexpr const char* mpi_timeout_variable = "FUSOR_MPI_TIMEOUT_S";
/// The environment variable that turns the collective check on (1, on, true) or off (0, off, false).
inline constexpr const char* mpi_check_variable = "FUSOR_MPI_CHECK_COLLECTIVES";

/// The timeout: `option`, else `environment` (FUSOR_MPI_TIMEOUT_S's value or null), else default_mpi_timeout.
inline seconds_d resolve_mpi_timeout(std::optional<seconds_d> option, const char* environment) {
  return resolve_timeout(option, environment, default_mpi_timeout, mpi_timeout_variable, "fusor::comm::mpi");
}
/// Whether to check collectives: `option`, else `environment` (FUSOR_MPI_CHECK_COLLECTIVES's value or
/// null), else on. Throws fusor::error for a value that is not 0/1, off/on or false/true.
inline bool resolve_mpi_check(std::optional<bool> option, const char* environment) {
  if (option) return *option;
  if (environment != nullptr && *environment != '\0') {
    const std::string v = environment;
    if (v == "1" || v == "on" || v == "true") return true;
    if (v == "0" || v == "off" || v == "false") return false;
    throw error(std::string("fusor::comm::mpi: ") + mpi_check_variable + "=\"" + v + "\" is not 0 or 1");
  }
  return true;
}

/// One collective as the check compares it and the messages name it.
struct mpi_call {
  /// The collectives, as `what` numbers them.
  enum kind : std::int64_t { none = 0, all_reduce, reduce_scatter, all_gather, broadcast, reduce };
  std::int64_t what = none;    ///< The collective: a kind.
  std::int64_t count = 0;      ///< Elements this rank passes (send's for reductions)
  std::int64_t type = 0;       ///< The element type's code (detail::element_code)
  std::int64_t op = -1;        ///< The reduction_op, -1: none
  std::int64_t root = -1;      ///< The root of broadcast and reduce, else -1
  std::int64_t sequence = 0;   ///< The collective's number: 1, 2, ... per communicator
  /// Whether two ranks' calls agree in every field.
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

/// The call as messages name it: "all_reduce #17 (1024 x float, sum)", "broadcast #3 (10 x int32, root 0)".
inline std::string describe(const mpi_call& c) {
  std::string s = std::string(detail::call_name(c.what)) + " #" + std::to_string(c.sequence) + " (" +
                  std::to_string(c.count) + " x " + detail::element_name(c.type);
  if (c.op >= 0) s += std::string(", ") + detail::op_name(c.op);
  if (c.root >= 0) s += ", root " + std::to_string(c.root);
  return s + ")";
}

/// The first rank whose call differs from rank 0's, as an error message; empty when all agree.
inline std::string mismatch_message(const std::vector<mpi_call>& calls) {
  for (std::size_t r = 1; r < calls.size(); ++r)
    if (!(calls[r] == calls[0]))
      return "fusor::comm::mpi: the ranks are about to call different collectives: rank 0 calls " +
             describe(calls[0]) + ", rank " + std::to_string(r) + " calls " + describe(calls[r]) +
             " (found by the collective check, " + mpi_check_variable + ")";
  return {};
}

/// The ranks that did not arrive at collective `sequence`, from the board's
/// entries (-1: the rank did not answer); world_ranks[r], where given and
/// different, is named beside rank r of a split communicator.
inline std::string missing_ranks(const std::vector<std::int64_t>& entered, std::int64_t sequence,
                                 const std::vector<int>& world_ranks = {}) {
  const auto name = [&](std::size_t r) {
    std::string n = std::to_string(r);
    if (r < world_ranks.size() && world_ranks[r] != int(r)) n += " (world rank " + std::to_string(world_ranks[r]) + ")";
    return n;
  };
  std::string late, silent;
  for (std::size_t r = 0; r < entered.size(); ++r) {
    if (entered[r] < 0) silent += (silent.empty() ? "" : ", ") + name(r);
    else if (entered[r] < sequence)
      late += (late.empty() ? "" : ", ") + name(r) + " (last entered #" + std::to_string(entered[r]) + ")";
  }
  std::string s;
  if (!late.empty()) s = "ranks that did not arrive: " + late;
  if (!silent.empty()) s += (s.empty() ? "" : "; ") + std::string("ranks that did not answer: ") + silent;
  return s.empty() ? "every rank arrived (the collective itself is stuck)" : s;
}

/// The progress board. One MPI window over the world (made by the first
/// communicator over all of MPI_COMM_WORLD) holds `slots` int64 a rank: slot 0
/// for that communicator, one more for each communicator split from it (the
/// members of a split agree on its slot, the lowest unused on all of them). A
/// rank stores the number of each collective it enters into its own entry of
/// its communicator's slot (a local store, no message); a rank whose wait timed
/// out reads its peers' entries (MPI_Rget), giving the reads a few seconds.
/// One window rather than one per communicator: OpenMPI 4.1 fails to make
/// windows over disjoint groups split from one communicator (their shared-memory
/// files collide). A communicator over another parent than the world, or past
/// the slots, has no board: a timeout then cannot name the missing ranks.
class mpi_progress_board {
 public:
  static constexpr int slots = 64;  ///< Entries a rank holds in the window: the root's and its splits'.

  mpi_progress_board() = default;
  mpi_progress_board(const mpi_progress_board&) = delete;
  mpi_progress_board& operator=(const mpi_progress_board&) = delete;

  /// The board of a communicator over all of MPI_COMM_WORLD (collective over it):
  /// a window of its own, slot 0.
  void open_root(MPI_Comm comm) {
    int size = 0;
    MPI_Comm_size(comm, &size);
    if (MPI_Win_allocate(slots * sizeof(std::int64_t), sizeof(std::int64_t), MPI_INFO_NULL, comm, &entries_, &window_) !=
        MPI_SUCCESS) {
      window_ = MPI_WIN_NULL;  // no board; MPI said why on stderr
      return;
    }
    for (int s = 0; s < slots; ++s) entries_[s] = 0;
    MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);
    owner_ = true;
    used_ = std::make_shared<std::uint64_t>(1);  // slot 0
    window_ranks_.resize(std::size_t(size));
    for (int r = 0; r < size; ++r) window_ranks_[std::size_t(r)] = r;
  }
  /// The board of `child`, split from the communicator `parent` whose board this
  /// is (collective over parent: one all-reduce of the slots in use).
  void open_split(const mpi_progress_board& parent, MPI_Comm parent_comm, MPI_Comm child) {
    if (parent.window_ == MPI_WIN_NULL) return;
    std::uint64_t used = *parent.used_;
    MPI_Allreduce(MPI_IN_PLACE, &used, 1, MPI_UINT64_T, MPI_BOR, parent_comm);
    int slot = 0;
    while (slot < slots && (used >> slot & 1u)) ++slot;
    if (slot == slots) return;  // every slot taken on some member: no board
    *parent.used_ |= std::uint64_t(1) << slot;
    window_ = parent.window_;
    entries_ = parent.entries_;
    used_ = parent.used_;
    slot_ = slot;
    // Member i of child is rank window_ranks_[i] of the window.
    MPI_Group parent_group, child_group;
    MPI_Comm_group(parent_comm, &parent_group);
    MPI_Comm_group(child, &child_group);
    int size = 0;
    MPI_Group_size(child_group, &size);
    const std::size_t n = static_cast<std::size_t>(size);
    std::vector<int> members(n), in_parent(n);
    for (int r = 0; r < size; ++r) members[std::size_t(r)] = r;
    MPI_Group_translate_ranks(child_group, size, members.data(), parent_group, in_parent.data());
    MPI_Group_free(&parent_group);
    MPI_Group_free(&child_group);
    window_ranks_.resize(n);
    for (std::size_t r = 0; r < n; ++r) window_ranks_[r] = parent.window_ranks_[std::size_t(in_parent[r])];
    entries_[slot_] = 0;
  }
  /// The root's board: collective (MPI_Win_free) while every rank is in step;
  /// the communicators split from it must be gone. A split's board frees its slot.
  void close() {
    if (window_ == MPI_WIN_NULL) return;
    if (owner_) {
      MPI_Win_unlock_all(window_);
      MPI_Win_free(&window_);
    } else {
      *used_ &= ~(std::uint64_t(1) << slot_);
    }
    window_ = MPI_WIN_NULL;
  }

  /// Whether there is a board (without one, a timeout cannot name the missing ranks).
  bool open() const { return window_ != MPI_WIN_NULL; }
  /// The window rank of each member (for messages: the world rank).
  const std::vector<int>& window_ranks() const { return window_ranks_; }

  /// Publishes that this rank has entered collective number `sequence` (a local store); nothing without a board.
  void enter(std::int64_t sequence) {
    if (window_ == MPI_WIN_NULL) return;
    static_cast<volatile std::int64_t*>(entries_)[slot_] = sequence;
    MPI_Win_sync(window_);
  }
  /// Every member's entry; -1 for a member that did not answer within `patience`.
  std::vector<std::int64_t> read(seconds_d patience) const {
    const std::size_t n = window_ranks_.size();
    std::vector<std::int64_t> entered(n, -1);
    if (window_ == MPI_WIN_NULL) return entered;
    std::vector<MPI_Request> reads(n, MPI_REQUEST_NULL);
    for (std::size_t r = 0; r < n; ++r)
      if (MPI_Rget(&entered[r], 1, MPI_INT64_T, window_ranks_[r], slot_, 1, MPI_INT64_T, window_, &reads[r]) !=
          MPI_SUCCESS)
        reads[r] = MPI_REQUEST_NULL;
    std::vector<bool> answered(n, false);
    const auto start = steady_now{}();
    for (std::size_t poll = 0; seconds_d(steady_now{}() - start) < patience; ++poll) {
      bool all = true;
      for (std::size_t r = 0; r < n; ++r) {
        if (answered[r] || reads[r] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_Test(&reads[r], &done, MPI_STATUS_IGNORE);
        answered[r] = done != 0;
        all = all && done;
      }
      if (all) break;
      thread_pause{}(poll_pause(poll));
    }
    for (std::size_t r = 0; r < n; ++r)
      if (!answered[r]) entered[r] = -1;  // a read still in flight is abandoned
    return entered;
  }

 private:
  MPI_Win window_ = MPI_WIN_NULL;
  std::int64_t* entries_ = nullptr;          // this rank's slots in the window
  int slot_ = 0;
  bool owner_ = false;                       // the root: frees the window
  std::shared_ptr<std::uint64_t> used_;      // the slots in use on this rank, shared with the root
  std::vector<int> window_ranks_;
};

/// What a communicator's waits share: the timeout, the board, and the rank.
struct mpi_watch {
  seconds_d timeout = default_mpi_timeout;  ///< How long a wait may take.
  bool check_collectives = false;  ///< Whether each collective is first checked against the other ranks'.
  /// This rank in the communicator.
  int rank = 0, world_rank = 0;  ///< This rank in MPI_COMM_WORLD.
  mpi_progress_board board;  ///< The communicator's progress board.
};

/// The message of a wait that timed out.
inline std::string mpi_timeout_message(const std::string& call, int rank, seconds_d waited, const mpi_watch& watch,
                                       const std::string& missing) {
  std::string who = "rank " + std::to_string(rank);
  if (watch.world_rank != rank) who += " (world rank " + std::to_string(watch.world_rank) + ")";
  return "fusor::comm::mpi: " + call + " on " + who + ": not complete after waiting " +
         seconds_text(waited) + " (the timeout is " + seconds_text(watch.timeout) + "; set it with " +
         mpi_timeout_variable + " or mpi_options::timeout)" + (missing.empty() ? std::string() : "; " + missing) +
         "; the job must end (MPI_Abort): a pending MPI request cannot be cancelled";
}

namespace detail {
// Open MPI 4 reports a failed step of a non-blocking collective (ranks out of
// step: a message longer than its receive, MPI_ERR_TRUNCATE) on MPI_COMM_WORLD,
// whose handler aborts the job with a message that names no call. While fusor
// tests a request the world's errors return instead, and throw mpi_error naming
// the call; the world's own handler is restored afterwards.
class world_errors_return {
 public:
  world_errors_return() {
    if (MPI_Comm_get_errhandler(MPI_COMM_WORLD, &previous_) == MPI_SUCCESS)
      set_ = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN) == MPI_SUCCESS;
  }
  world_errors_return(const world_errors_return&) = delete;
  world_errors_return& operator=(const world_errors_return&) = delete;
  ~world_errors_return() {
    if (!set_) return;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, previous_);
    MPI_Errhandler_free(&previous_);  // the reference MPI_Comm_get_errhandler took
  }

 private:
  MPI_Errhandler previous_ = MPI_ERRHANDLER_NULL;
  bool set_ = false;
};
}  // namespace detail

/// Whether `request` has completed (MPI_Test); throws mpi_error naming `call` when MPI reports a failure, with a
/// hint where ranks out of step are the likely cause and the collective check is off.
inline bool test_request(MPI_Request& request, const mpi_watch& watch, const std::string& call,
                         std::int64_t sequence) {
  detail::waiting_receives().match();  // checked receives take in their messages while anything waits
  int done = 0;
  const int code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  if (code == MPI_SUCCESS) return done != 0;
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  const bool out_of_step = error_class == MPI_ERR_TRUNCATE && !watch.check_collectives;
  try {
    detail::mpi_check(code, call.c_str());
  } catch (const mpi_error& e) {
    if (!out_of_step) throw;
    throw mpi_error(std::string(e.what()) + " (a longer message than this rank expected: " +
                    (sequence > 0 ? "the ranks are likely out of step, calling different collectives or the same "
                                    "with different sizes"
                                  : "a send longer than its recv") +
                    "; set " + mpi_check_variable + "=1 to check each collective against the other ranks' and each "
                    "message against its recv)");
  }
  return false;
}

/// Polls `done` until it returns true, under the watch's timeout; on timeout calls `abandon` and throws
/// mpi_timeout_error. `sequence` > 0 for a collective (the board names the ranks that did not arrive), 0 for a
/// message.
template <class Done, class Abandon>
void wait_polled(Done&& done, Abandon&& abandon, const mpi_watch& watch, const std::string& call,
                 std::int64_t sequence) {
  const detail::world_errors_return errors_return;
  const auto start = steady_now{}();
  for (std::size_t poll = 0;; ++poll) {
    if (done()) return;
    const seconds_d waited = steady_now{}() - start;
    if (waited >= watch.timeout) {
      std::string missing;
      if (sequence > 0)
        missing = watch.board.open()
                      ? missing_ranks(watch.board.read(seconds_d(2.0)), sequence, watch.board.window_ranks())
                      : "the ranks that did not arrive are unknown (no progress board: a communicator over another "
                        "parent than MPI_COMM_WORLD)";
      abandon();
      throw mpi_timeout_error(mpi_timeout_message(call, watch.rank, waited, watch, missing));
    }
    thread_pause{}(poll_pause(poll));
  }
}
/// Waits for `request` under the watch's timeout; on timeout the request is
/// abandoned (set to null: MPI keeps it until the job ends) and mpi_timeout_error thrown.
inline void wait_watched(MPI_Request& request, const mpi_watch& watch, const std::string& call, std::int64_t sequence) {
  wait_polled([&] { return test_request(request, watch, call, sequence); }, [&] { request = MPI_REQUEST_NULL; },
              watch, call, sequence);
}

}  // namespace fusor::comm
