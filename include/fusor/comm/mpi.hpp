// fusor/comm/mpi.hpp — the MPI communicator (host memory), MPI's start and end, and
// what makes one failing rank end the whole job. Link fusor::mpi (OpenMPI on
// Debian: libopenmpi-dev openmpi-bin); only units including this header need mpi.h.
//
//   int main(int argc, char** argv) {
//     return fusor::comm::run_ranks(argc, argv, [](fusor::comm::mpi& c) {
//       c.all_reduce(gradients, fusor::comm::reduction_op::avg).wait();
//       return 0;
//     });
//   }
//
// run_ranks starts MPI (an mpi_environment), makes a communicator over a duplicate
// of MPI_COMM_WORLD, runs main and ends MPI; an exception escaping main is printed
// with its rank and aborts every rank (MPI_Abort) instead of leaving the others
// waiting in a collective. Without run_ranks: keep an mpi_environment alive in
// main, inside a try block — if it is destroyed by an exception's unwinding it
// calls MPI_Abort (an exception that no handler catches may end the process
// without unwinding; OpenMPI's mpirun then ends the job itself).
//
// Failed MPI calls throw mpi_error naming the call, the rank and MPI's message
// (the communicator returns errors instead of MPI's default of aborting).
// Every collective is non-blocking (MPI_I...) and returns an mpi_request. avg is
// a sum followed, in wait(), by a division by size(). bf16/fp16: see mpi_types.hpp.
// Waits never hang forever, and diverging ranks can be caught before they hang
// (mpi_options: a timeout, and the collective check): see comm/mpi_watchdog.hpp.
#pragma once

#include <fusor/comm/communicator.hpp>
#include <fusor/comm/mpi_error.hpp>
#include <fusor/comm/mpi_types.hpp>
#include <fusor/comm/mpi_watchdog.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fusor::comm {

/// Starts MPI (unless already started) and ends it; destroyed while an exception
/// unwinds the stack, it aborts every rank instead.
class mpi_environment {
 public:
  /// Starts MPI without the program's arguments.
  mpi_environment() : mpi_environment(nullptr, nullptr) {}
  /// Starts MPI with main()'s arguments (MPI_Init may consume its own). Throws mpi_error when MPI_Init fails.
  mpi_environment(int& argc, char**& argv) : mpi_environment(&argc, &argv) {}
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    if (std::uncaught_exceptions() > exceptions_at_start_) {
      std::fprintf(stderr, "fusor: rank %d: an exception is leaving MPI's scope; aborting every rank\n",
                   detail::world_rank());
      std::fflush(stderr);
      abort(1);
    }
    if (owns_) MPI_Finalize();
  }
  /// Ends every rank of the job now.
  [[noreturn]] static void abort(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::abort();
  }

 private:
  mpi_environment(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      detail::mpi_check(MPI_Init(argc, argv), "MPI_Init");
      owns_ = true;
    }
  }
  bool owns_ = false;
  int exceptions_at_start_ = std::uncaught_exceptions();
};

/// A collective or message in flight. wait() finishes it (and an avg's division)
/// under the communicator's timeout; destroyed unwaited, it waits, so buffers
/// are never left in MPI's hands (a timeout there ends the job: a destructor
/// cannot throw).
class [[nodiscard]] mpi_request {
 public:
  /// Made by mpi's calls: `r` named `call` in messages, waited for under `watch`; `sequence` is the
  /// collective's number (0 for a message) and `after` runs once it has completed.
  mpi_request(MPI_Request r, std::string call, const mpi_watch* watch, std::int64_t sequence,
              std::function<void()> after = {})
      : request_(r), call_(std::move(call)), watch_(watch), sequence_(sequence), after_(std::move(after)) {}
  /// A checked recv (comm/mpi_receives.hpp): its MPI request comes once its message has been measured.
  mpi_request(std::shared_ptr<detail::checked_receive> receive, const mpi_watch* watch)
      : request_(MPI_REQUEST_NULL), call_(receive->call), watch_(watch), sequence_(0), receive_(std::move(receive)) {}
  /// Moved: the new request waits; the old one is left empty.
  mpi_request(mpi_request&& o) noexcept
      : request_(std::exchange(o.request_, MPI_REQUEST_NULL)), call_(std::move(o.call_)), watch_(o.watch_),
        sequence_(o.sequence_), after_(std::move(o.after_)), receive_(std::move(o.receive_)) {
    o.after_ = {};
  }
  mpi_request& operator=(mpi_request&&) = delete;
  ~mpi_request() {
    // A checked recv that failed gave MPI no buffer: nothing to wait for.
    if (receive_ && !receive_->failure.empty()) return;
    if (request_ == MPI_REQUEST_NULL && !receive_) return;
    try {
      wait_polled([&] { return poll(); }, [&] { abandon(); }, *watch_, call_, sequence_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fusor: rank %d: %s\n", detail::world_rank(), e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  /// Blocks until the buffers may be read and reused. Throws mpi_timeout_error after the communicator's
  /// timeout, mpi_error when MPI fails.
  void wait() {
    if (request_ == MPI_REQUEST_NULL && !after_ && !receive_) return;
    wait_polled([&] { return poll(); }, [&] { abandon(); }, *watch_, call_, sequence_);
    finish();
  }
  /// Whether it has completed (then it is finished as wait() would); does not block.
  bool test() {
    if (request_ == MPI_REQUEST_NULL && !after_ && !receive_) return true;
    const detail::world_errors_return errors_return;
    const bool done = poll();
    if (done) finish();
    return done;
  }

 private:
  // One look: whether the request has completed. A checked recv first waits for its message (its failure is
  // thrown, once), then for MPI's request.
  bool poll() {
    if (receive_) {
      if (receive_->failure.empty()) detail::waiting_receives().match();
      if (!receive_->failure.empty()) {
        const auto failed = std::exchange(receive_, nullptr);
        if (failed->mismatch) throw mpi_mismatch_error(failed->failure);
        throw mpi_error(failed->failure);
      }
      if (!receive_->matched) return false;
      request_ = std::exchange(receive_->request, MPI_REQUEST_NULL);
      receive_.reset();
    }
    return request_ == MPI_REQUEST_NULL || test_request(request_, *watch_, call_, sequence_);
  }
  // After a timeout: MPI keeps a started request until the job ends; a recv still waiting for its message
  // leaves the list, so MPI never gets its buffer.
  void abandon() {
    if (receive_) detail::waiting_receives().abandon(*receive_);
    receive_.reset();
    request_ = MPI_REQUEST_NULL;
  }
  void finish() {
    auto after = std::exchange(after_, {});
    if (after) after();
  }
  MPI_Request request_;
  std::string call_;  // as messages name it: "all_reduce #3 (1024 x float, sum)"
  const mpi_watch* watch_;
  std::int64_t sequence_;  // 0 for a message
  std::function<void()> after_;
  std::shared_ptr<detail::checked_receive> receive_;  // a checked recv still waiting for its message
};

/// A communicator over a duplicate of an MPI communicator (MPI_COMM_WORLD by
/// default), so fusor's messages never match the program's own.
class mpi {
 public:
  /// Duplicates `parent` (collective: every rank of it calls this); `options`: the timeout and the
  /// collective check (comm/mpi_watchdog.hpp). Throws mpi_error when MPI fails.
  explicit mpi(MPI_Comm parent = MPI_COMM_WORLD, mpi_options options = {}) : mpi(parent, options, nullptr) {}
  mpi(const mpi&) = delete;
  mpi& operator=(const mpi&) = delete;
  /// Moved: the new one owns the MPI communicator; requests still in flight keep working.
  mpi(mpi&& o) noexcept
      : comm_(std::exchange(o.comm_, MPI_COMM_NULL)), rank_(o.rank_), size_(o.size_), local_rank_(o.local_rank_),
        ops_(std::exchange(o.ops_, {})), watch_(std::move(o.watch_)), sequence_(o.sequence_) {}
  mpi& operator=(mpi&&) = delete;
  ~mpi() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // While an exception unwinds, the job is about to be aborted: freeing the
    // communicator (collective in MPI's terms) could wait for the other ranks.
    if (comm_ == MPI_COMM_NULL || finalized || std::uncaught_exceptions() > 0) return;
    watch_->board.close();
    detail::waiting_receives().drop(comm_);
    ops_.free();
    MPI_Comm_free(&comm_);
  }

  /// This process's rank in the communicator, from 0 to size() - 1.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }
  /// This process's rank among the communicator's ranks on its machine.
  int local_rank() const { return local_rank_; }
  /// The MPI communicator underneath (owned by this object), for MPI calls of the program's own.
  MPI_Comm native() const { return comm_; }
  /// The ranks of this communicator with the same `color`, ordered by `key` (then
  /// by rank): MPI_Comm_split. Collective: every rank calls it. Same options; it
  /// must be destroyed before this communicator (its progress board is a slot of this one's).
  mpi split(int color, int key) const {
    MPI_Comm part = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
    mpi result(part, {.timeout = watch_->timeout, .check_collectives = watch_->check_collectives}, this);
    MPI_Comm_free(&part);
    return result;
  }
  /// How long a wait may take.
  seconds_d timeout() const { return watch_->timeout; }
  /// Whether each collective is first checked against the other ranks' (mpi_options::check_collectives).
  bool checks_collectives() const { return watch_->check_collectives; }
  /// How many collectives this communicator has started (the last one's number).
  std::int64_t collectives_started() const { return sequence_; }

  /// Starts recv = `op` over the ranks of send (the same size and element type; recv may be send).
  template <class S, class R>
  mpi_request all_reduce(const S& send, const R& recv, reduction_op op) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_same_size(s.size, r.size, "all_reduce", "send", "recv");
    const mpi_call call = begin(mpi_call::all_reduce, s, op);
    return reduction(s.data == r.data ? MPI_IN_PLACE : s.data, r, op, call, "MPI_Iallreduce", [&](auto* sb, MPI_Op o, MPI_Request* q) {
      return MPI_Iallreduce(sb, r.data, count(r.size), type_of(r), o, comm_, q);
    });
  }
  /// Starts inout = `op` over the ranks of inout, in place.
  template <class V>
  mpi_request all_reduce(const V& inout, reduction_op op) const {
    return all_reduce(inout, inout, op);
  }
  /// Starts recv = chunk rank() of `op` over the ranks of send; send.size() == recv.size() * size().
  template <class S, class R>
  mpi_request reduce_scatter(const S& send, const R& recv, reduction_op op) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_chunks(s.size, r.size, size_, "reduce_scatter", "send", "recv");
    const mpi_call call = begin(mpi_call::reduce_scatter, s, op);
    return reduction(s.data, r, op, call, "MPI_Ireduce_scatter_block", [&](auto* sb, MPI_Op o, MPI_Request* q) {
      return MPI_Ireduce_scatter_block(sb, r.data, count(r.size), type_of(r), o, comm_, q);
    });
  }
  /// In place: inout holds this rank's whole contribution; its chunk rank() of
  /// size() receives the reduction (NCCL's convention: a shard stays where it lies).
  template <class V>
  mpi_request reduce_scatter(const V& inout, reduction_op op) const {
    const auto b = checked(inout, "reduce_scatter's buffer");
    detail::require_divisible(b.size, size_, "reduce_scatter");
    using T = element_of<decltype(b)>;
    const index_t chunk = b.size / size_;
    const mpi_call call = begin(mpi_call::reduce_scatter, b, op);
    MPI_Request q;
    detail::mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, b.data, count(chunk), type_of(b),
                                                ops_.template get<T>(op == reduction_op::max), comm_, &q),
                      "MPI_Ireduce_scatter_block");
    // MPI leaves the result at the start of the buffer: move it to this rank's chunk.
    return {q, describe(call), watch_.get(), call.sequence, [data = b.data, chunk, rank = rank_, ranks = size_, op] {
              T* mine = data + chunk * rank;
              if (rank != 0) std::copy(data, data + chunk, mine);
              if (op == reduction_op::avg)
                for (index_t i = 0; i < chunk; ++i) mine[i] = convert<T>(convert<double>(mine[i]) / ranks);
            }};
  }
  /// Starts recv = every rank's send, in rank order; recv.size() == send.size() * size().
  template <class S, class R>
  mpi_request all_gather(const S& send, const R& recv) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_chunks(r.size, s.size, size_, "all_gather", "recv", "send");
    const mpi_call call = begin(mpi_call::all_gather, s);
    MPI_Request q;
    detail::mpi_check(MPI_Iallgather(s.data, count(s.size), type_of(s), r.data, count(s.size), type_of(r), comm_, &q),
                      "MPI_Iallgather");
    return {q, describe(call), watch_.get(), call.sequence};
  }
  /// In place: this rank's chunk of inout (chunk rank() of size()) is its contribution.
  template <class V>
  mpi_request all_gather(const V& inout) const {
    const auto r = checked(inout, "all_gather's buffer");
    detail::require_divisible(r.size, size_, "all_gather");
    const mpi_call call = begin(mpi_call::all_gather, r);
    MPI_Request q;
    detail::mpi_check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, r.data, count(r.size / size_), type_of(r),
                                     comm_, &q),
                      "MPI_Iallgather");
    return {q, describe(call), watch_.get(), call.sequence};
  }
  /// Starts inout = root's inout. Throws fusor::error when `root` is not a rank.
  template <class V>
  mpi_request broadcast(const V& inout, int root) const {
    detail::require_rank(root, size_, "broadcast", "root");
    const auto b = checked(inout, "broadcast's buffer");
    const mpi_call call = begin(mpi_call::broadcast, b, std::nullopt, root);
    MPI_Request q;
    detail::mpi_check(MPI_Ibcast(b.data, count(b.size), type_of(b), root, comm_, &q), "MPI_Ibcast");
    return {q, describe(call), watch_.get(), call.sequence};
  }
  /// Starts recv = `op` over the ranks of send, on `root`: recv is written on root only (other ranks' recv
  /// is not touched).
  template <class S, class R>
  mpi_request reduce(const S& send, const R& recv, reduction_op op, int root) const {
    detail::require_rank(root, size_, "reduce", "root");
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_same_size(s.size, r.size, "reduce", "send", "recv");
    const bool here = rank_ == root;
    const mpi_call call = begin(mpi_call::reduce, s, op, root);
    return reduction(
        here && s.data == r.data ? MPI_IN_PLACE : s.data, r, here ? op : (op == reduction_op::avg ? reduction_op::sum : op),
        call, "MPI_Ireduce", [&](auto* sb, MPI_Op o, MPI_Request* q) {
          return MPI_Ireduce(sb, r.data, count(r.size), type_of(r), o, root, comm_, q);
        });
  }
  /// Starts sending `data` to rank `peer`, matched by a recv with the same `tag`.
  template <class V>
  mpi_request send(const V& data, int peer, int tag) const {
    detail::require_rank(peer, size_, "send", "peer");
    const auto d = checked(data, "send's buffer");
    MPI_Request q;
    detail::mpi_check(MPI_Isend(d.data, count(d.size), type_of(d), peer, tag, comm_, &q), "MPI_Isend");
    return {q, message_name("send to", d, peer, tag), watch_.get(), 0};
  }
  /// Starts receiving into `data` from rank `peer`, matched by a send with the same `tag`. With the collective
  /// check on, the message is measured before MPI gets `data` (comm/mpi_receives.hpp): one of another size
  /// throws mpi_mismatch_error, from recv or the request's wait or test, and `data` is not written.
  template <class V>
  mpi_request recv(const V& data, int peer, int tag) const {
    detail::require_rank(peer, size_, "recv", "peer");
    const auto d = checked(data, "recv's buffer");
    std::string call = message_name("recv from", d, peer, tag);
    if (watch_->check_collectives) {
      auto receive = std::make_shared<detail::checked_receive>(detail::checked_receive{
          .comm = comm_, .data = d.data, .count = count(d.size), .type = type_of(d),
          .bytes = std::int64_t(d.size) * std::int64_t(sizeof(element_of<decltype(d)>)), .peer = peer, .tag = tag,
          .call = std::move(call)});
      detail::waiting_receives().add(receive);
      mpi_request request(receive, watch_.get());
      detail::waiting_receives().match();  // a message already here starts at once
      return request;
    }
    MPI_Request q;
    detail::mpi_check(MPI_Irecv(d.data, count(d.size), type_of(d), peer, tag, comm_, &q), "MPI_Irecv");
    return {q, std::move(call), watch_.get(), 0};
  }

  /// Non-blocking calls need no grouping: keep each request until it is waited for.
  no_group group() const { return {}; }

 private:
  template <class V>
  static auto checked(const V& v, const char* what) {
    using view_t = std::remove_cvref_t<decltype(as_view(v))>;
    static_assert(!std::is_same_v<typename view_t::space, device_space>,
                  "fusor: fusor::comm::mpi moves host memory: copy device tensors to the host (or use the nccl policy)");
    return detail::flat(v, what);
  }
  template <class F>
  using element_of = std::remove_cvref_t<decltype(*std::declval<F>().data)>;
  template <class F>
  static MPI_Datatype type_of(const F&) { return detail::mpi_datatype<element_of<F>>(); }
  template <class A, class B>
  static void same_type(const A&, const B&) {
    static_assert(std::is_same_v<element_of<A>, element_of<B>>, "fusor: fusor::comm: send and recv must hold the same element type");
  }
  static int count(index_t n) {
    if (n > index_t{2147483647}) throw error("fusor::comm::mpi: " + std::to_string(n) + " elements exceed MPI's int count");
    return static_cast<int>(n);
  }
  // Starts a reduction with MPI's (or fusor's 16-bit) operation; avg divides the
  // result by size() once it has arrived.
  template <class R, class Start>
  mpi_request reduction(const void* send, const R& r, reduction_op op, const mpi_call& call, const char* mpi_name,
                        Start start) const {
    using T = element_of<R>;
    const MPI_Op mpi_op = ops_.template get<T>(op == reduction_op::max);
    MPI_Request q;
    detail::mpi_check(start(const_cast<void*>(send), mpi_op, &q), mpi_name);
    if (op != reduction_op::avg) return {q, describe(call), watch_.get(), call.sequence};
    return {q, describe(call), watch_.get(), call.sequence, [data = r.data, n = r.size, ranks = size_] {
              for (index_t i = 0; i < n; ++i) data[i] = convert<T>(convert<double>(data[i]) / ranks);
            }};
  }

  // Over `parent` (a duplicate of it); `split_from`: the communicator this one was split from, else null.
  mpi(MPI_Comm parent, const mpi_options& options, const mpi* split_from) {
    detail::mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    detail::mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    detail::mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    MPI_Comm local;
    detail::mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
                      "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
    ops_.create();
    watch_ = std::make_unique<mpi_watch>();
    watch_->timeout = resolve_mpi_timeout(options.timeout, std::getenv(mpi_timeout_variable));
    watch_->check_collectives = resolve_mpi_check(options.check_collectives, std::getenv(mpi_check_variable));
    watch_->rank = rank_;
    MPI_Comm_rank(MPI_COMM_WORLD, &watch_->world_rank);
    int same = MPI_UNEQUAL;
    MPI_Comm_compare(parent, MPI_COMM_WORLD, &same);
    if (split_from != nullptr) watch_->board.open_split(split_from->watch_->board, split_from->comm_, comm_);
    else if (same == MPI_IDENT || same == MPI_CONGRUENT) watch_->board.open_root(comm_);
  }

  // Numbers the next collective, publishes that this rank has entered it, and
  // checks it against the other ranks' (when asked).
  template <class F>
  mpi_call begin(std::int64_t what, const F& buffer, std::optional<reduction_op> op = std::nullopt, int root = -1) const {
    const mpi_call call{what, buffer.size, detail::element_code<element_of<F>>(), op ? std::int64_t(*op) : -1, root,
                        ++sequence_};
    watch_->board.enter(call.sequence);
    if (watch_->check_collectives) check_collective(call);
    return call;
  }
  void check_collective(const mpi_call& call) const {
    std::vector<mpi_call> calls(static_cast<std::size_t>(size_));
    MPI_Request q;
    detail::mpi_check(MPI_Iallgather(&call, sizeof(mpi_call), MPI_BYTE, calls.data(), sizeof(mpi_call), MPI_BYTE, comm_, &q),
                      "MPI_Iallgather");
    wait_watched(q, *watch_, "the collective check before " + describe(call), call.sequence);
    const std::string mismatch = mismatch_message(calls);
    if (!mismatch.empty()) throw mpi_mismatch_error(mismatch + " (seen on rank " + std::to_string(rank_) + ")");
  }
  template <class F>
  static std::string message_name(const char* what, const F& buffer, int peer, int tag) {
    return std::string(what) + " rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ", " +
           std::to_string(buffer.size) + " x " + detail::element_name(detail::element_code<element_of<F>>()) + ")";
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  detail::half_ops ops_;
  std::unique_ptr<mpi_watch> watch_;     // requests point at it
  mutable std::int64_t sequence_ = 0;    // the last collective's number
};

static_assert(communicator<mpi>);

/// Starts MPI, runs main(communicator) and ends MPI; an exception escaping main is
/// printed with the rank that threw it and ends every rank (MPI_Abort).
template <class Main>
int run_ranks(int& argc, char**& argv, Main&& main) {
  mpi_environment environment(argc, argv);
  try {
    mpi communicator;
    return std::forward<Main>(main)(communicator);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusor: rank %d failed: %s\n", detail::world_rank(), e.what());
    std::fflush(stderr);
    mpi_environment::abort(1);
  }
}

}  // namespace fusor::comm
