// fusor/comm/nccl.hpp — the NCCL communicator: collectives over device memory,
// ordered on a CUDA stream. nvcc units only; link NCCL (libnccl, in the CUDA Toolkit here).
//
//   fusor::comm::mpi host;                                   // or single, for one GPU
//   fusor::comm::use_local_device(host);                     // this rank's GPU, before making streams
//   auto gpus = fusor::comm::nccl::over(host, stream);      // rank 0 makes the id, host broadcasts it
//   gpus.all_reduce(gradients, fusor::comm::reduction_op::avg);  // queued on stream
//
// Each call is queued on the communicator's stream and returns an nccl_request
// (nccl_request.hpp: a CUDA event recorded after it): wait() blocks the host
// until it is done, test() asks; work queued later on the same stream needs no
// wait. Point-to-point pairs that depend on each other (a ring) must be issued
// inside one group(); their requests are done after the group's scope:
//   { auto g = gpus.group(); gpus.send(a, next, 0); gpus.recv(b, previous, 0); }
//
// Local rank r uses visible device r % count (device_choice.hpp), said once on
// stderr unless FUSOR_QUIET=1. Nothing waits forever (nccl_watchdog.hpp): the
// communicator is non-blocking and every wait fusor owns (requests, group end,
// init, finalize) polls under a timeout (nccl_options::timeout, else
// FUSOR_NCCL_TIMEOUT_S, else 10 minutes); a failure reported by NCCL or the
// timeout aborts the communicator (ncclCommAbort) and throws nccl_error naming
// the call, its count and type, the rank, the peer and the time waited. Failed
// calls throw nccl_error too. The destructor finalizes (ncclCommFinalize, then
// ncclCommDestroy); while an exception unwinds it aborts instead, so a failing
// rank does not wait for the others (run_ranks then ends the job).
#pragma once

#include <fusor/config.hpp>

#if !FUSOR_HAS_CUDA
#error "fusor/comm/nccl.hpp needs a CUDA translation unit (nvcc)"
#else

#include <cuda_runtime.h>
#include <nccl.h>

#include <fusor/comm/communicator.hpp>
#include <fusor/comm/device_choice.hpp>
#include <fusor/comm/nccl_types.hpp>
#include <fusor/comm/nccl_request.hpp>
#include <fusor/comm/nccl_watchdog.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace fusor::comm {

/// How one communicator is made; every field may be left out.
struct nccl_options {
  /// How long a wait may last before the communicator is aborted; unset: FUSOR_NCCL_TIMEOUT_S, else 10 minutes.
  std::optional<seconds_d> timeout{};
  /// No line on stderr saying which device this rank uses (as FUSOR_QUIET=1).
  bool quiet = false;
  /// The local rank that chooses the device in over(host): unset, the host
  /// communicator's. Give the world's for a communicator over part of the ranks
  /// (a mesh's data group holds ranks 0 and 2 of a machine: their local ranks in
  /// the group are 0 and 1, their devices must be 0 and 2).
  std::optional<int> local_rank{};
};

/// Sets this process's CUDA device for local rank `local_rank`: choose_device,
/// visible device local_rank % count (fusor/comm/device_choice.hpp). Says which
/// on stderr, once per process and device, unless `quiet` or FUSOR_QUIET is set.
/// nccl's constructor calls it; call it yourself before making the streams the
/// communicator will use, so that they are made on that device.
inline int use_local_device(int rank, int local_rank, bool quiet = false) {
  const char* visible_list = std::getenv("CUDA_VISIBLE_DEVICES");
  int visible = 0;
  if (const cudaError_t counted = cudaGetDeviceCount(&visible); counted != cudaSuccess) {
    (void)cudaGetLastError();
    throw nccl_error("fusor::comm::nccl: rank " + std::to_string(rank) + " (local rank " + std::to_string(local_rank) +
                     ") cannot count its CUDA devices: " + cudaGetErrorString(counted) + " (" +
                     (visible_list ? std::string("CUDA_VISIBLE_DEVICES=") + visible_list
                                   : std::string("CUDA_VISIBLE_DEVICES not set")) +
                     ")");
  }
  const int device = choose_device(local_rank, visible, visible_list);
  detail::nccl_cuda_check(cudaSetDevice(device), {"choosing the device", rank, -1}, "cudaSetDevice");
  static std::atomic<int> announced{-1};
  if (!quiet && !quiet_requested(std::getenv(quiet_variable)) && announced.exchange(device) != device)
    std::fprintf(stderr, "%s\n", device_choice_line(rank, local_rank, device, visible, visible_list).c_str());
  return device;
}
/// use_local_device() for the rank and local rank of a host communicator (mpi, single).
template <class Host>
int use_local_device(const Host& host, bool quiet = false) {
  return use_local_device(host.rank(), host.local_rank(), quiet);
}

/// The NCCL communicator: collectives and messages over device memory, queued on one CUDA stream, each
/// returning an nccl_request; every wait is bounded by the timeout (comm/nccl_watchdog.hpp).
class nccl {
 public:
  /// Rank `rank` of `size`, all made with the same id, on the device
  /// use_local_device(rank, local_rank) chooses; `stream` must be on that device.
  /// Collective: every rank makes its own. Throws nccl_error when NCCL or CUDA fails or the timeout passes.
  nccl(const ncclUniqueId& id, int rank, int size, int local_rank, cudaStream_t stream, const nccl_options& options = {})
      : state_(std::make_shared<detail::nccl_state>()), rank_(rank), size_(size), local_rank_(local_rank),
        stream_(stream) {
    state_->rank = rank;
    state_->timeout = nccl_timeout_from_environment(options.timeout);
    device_ = use_local_device(rank, local_rank, options.quiet);
    require_stream_on_device();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait is fusor's, polled under the timeout
    const nccl_operation op{"ncclCommInitRankConfig (" + std::to_string(size) + " ranks)", rank, -1};
    ncclComm_t comm = nullptr;
    const ncclResult_t result = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    state_->comm = comm;
    if (result != ncclSuccess && result != ncclInProgress) {
      const std::string message = "fusor::comm::nccl: " + describe(op) + " failed: " + detail::nccl_result_text(result, comm);
      state_->abort(message);
      throw nccl_error(message);
    }
    state_->settle(op);
  }
  /// Over a host communicator (mpi, or single for one GPU): rank 0 makes the id
  /// and the host communicator broadcasts it.
  template <class Host>
  static nccl over(const Host& host, cudaStream_t stream, const nccl_options& options = {}) {
    ncclUniqueId id{};
    if (host.rank() == 0) {
      const ncclResult_t made = ncclGetUniqueId(&id);
      if (made != ncclSuccess)
        throw nccl_error("fusor::comm::nccl: ncclGetUniqueId failed on rank 0: " + detail::nccl_result_text(made, nullptr));
    }
    view<std::uint8_t, dextents<index_t, 1>> bytes(reinterpret_cast<std::uint8_t*>(id.internal), index_t{sizeof(id.internal)});
    host.broadcast(bytes, 0).wait();
    return nccl(id, host.rank(), host.size(), options.local_rank.value_or(host.local_rank()), stream, options);
  }
  /// Moved: the new one owns the NCCL communicator; calls on the old one throw nccl_error.
  nccl(nccl&& o) noexcept
      : state_(std::move(o.state_)), rank_(o.rank_), size_(o.size_), local_rank_(o.local_rank_), device_(o.device_),
        collectives_(o.collectives_), stream_(o.stream_) {}
  nccl(const nccl&) = delete;
  nccl& operator=(const nccl&) = delete;
  // Normally finalize(), a failure printed on stderr. While an exception
  // unwinds (this rank is failing; run_ranks then aborts the job),
  // ncclCommAbort: it does not wait for ranks that will never come.
  ~nccl() {
    if (!state_ || state_->comm == nullptr) return;
    if (std::uncaught_exceptions() > 0) {
      state_->abort("destroyed while an exception unwinds");
      return;
    }
    try {
      finalize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    }
  }

  /// Completes every call issued, waits (polling, under the timeout) until the
  /// communicator is quiescent, then frees it: ncclCommFinalize, ncclCommDestroy.
  /// The destructor does it; call it to see a failure as an nccl_error. Later
  /// calls throw.
  void finalize() {
    if (!state_ || state_->comm == nullptr) return;  // moved from, aborted or finalized
    const nccl_operation op{"ncclCommFinalize", rank_, -1};
    const ncclResult_t result = ncclCommFinalize(state_->comm);
    if (result != ncclSuccess && result != ncclInProgress) {
      const std::string message =
          "fusor::comm::nccl: " + describe(op) + " failed: " + detail::nccl_result_text(result, state_->comm);
      state_->abort(message);
      throw nccl_error(message);
    }
    state_->settle(op);
    const ncclResult_t destroyed = ncclCommDestroy(state_->comm);
    state_->comm = nullptr;
    if (destroyed != ncclSuccess)
      throw nccl_error("fusor::comm::nccl: ncclCommDestroy failed on rank " + std::to_string(rank_) + ": " +
                       ncclGetErrorString(destroyed));
  }

  /// This rank, from 0 to size() - 1.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }
  /// The local rank that chose the device.
  int local_rank() const { return local_rank_; }
  /// The CUDA device this rank uses (use_local_device).
  int device() const { return device_; }
  /// The stream every call is queued on.
  cudaStream_t stream() const { return stream_; }
  /// How long a wait may last before the communicator is aborted.
  seconds_d timeout() const { return state_ ? state_->timeout : default_nccl_timeout; }
  /// The NCCL communicator underneath; null once finalized or aborted.
  ncclComm_t native() const { return state_ ? state_->comm : nullptr; }
  /// Whether a failure or a timeout aborted the communicator.
  bool aborted() const { return state_ && !state_->aborted_because.empty(); }

  /// Queues recv = `op` over the ranks of send (the same size and element type; recv may be send).
  template <class S, class R>
  nccl_request all_reduce(const S& send, const R& recv, reduction_op op) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_same_size(s.size, r.size, "all_reduce", "send", "recv");
    const auto o = operation("ncclAllReduce", r, r.size, op);
    return issue(ncclAllReduce(s.data, r.data, n(r.size), type_of(r), detail::nccl_op(op), comm(o), stream_), o);
  }
  /// Queues inout = `op` over the ranks of inout, in place.
  template <class V>
  nccl_request all_reduce(const V& inout, reduction_op op) const {
    return all_reduce(inout, inout, op);
  }
  /// Queues recv = chunk rank() of `op` over the ranks of send; send.size() == recv.size() * size().
  template <class S, class R>
  nccl_request reduce_scatter(const S& send, const R& recv, reduction_op op) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_chunks(s.size, r.size, size_, "reduce_scatter", "send", "recv");
    const auto o = operation("ncclReduceScatter", r, r.size, op);
    return issue(ncclReduceScatter(s.data, r.data, n(r.size), type_of(r), detail::nccl_op(op), comm(o), stream_), o);
  }
  /// In place: chunk rank() of inout receives the reduction (recvbuff = sendbuff + rank * count).
  template <class V>
  nccl_request reduce_scatter(const V& inout, reduction_op op) const {
    const auto b = checked(inout, "reduce_scatter's buffer");
    detail::require_divisible(b.size, size_, "reduce_scatter");
    const index_t chunk = b.size / size_;
    const auto o = operation("ncclReduceScatter", b, chunk, op);
    return issue(ncclReduceScatter(b.data, b.data + chunk * rank_, n(chunk), type_of(b), detail::nccl_op(op), comm(o),
                                   stream_),
                 o);
  }
  /// Queues recv = every rank's send, in rank order; recv.size() == send.size() * size().
  template <class S, class R>
  nccl_request all_gather(const S& send, const R& recv) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_chunks(r.size, s.size, size_, "all_gather", "recv", "send");
    const auto o = operation("ncclAllGather", s, s.size);
    return issue(ncclAllGather(s.data, r.data, n(s.size), type_of(s), comm(o), stream_), o);
  }
  /// In place: this rank's chunk of inout (chunk rank() of size()) is its contribution.
  template <class V>
  nccl_request all_gather(const V& inout) const {
    const auto r = checked(inout, "all_gather's buffer");
    detail::require_divisible(r.size, size_, "all_gather");
    const index_t chunk = r.size / size_;
    const auto o = operation("ncclAllGather", r, chunk);
    return issue(ncclAllGather(r.data + chunk * rank_, r.data, n(chunk), type_of(r), comm(o), stream_), o);
  }
  /// Queues inout = root's inout. Throws fusor::error when `root` is not a rank.
  template <class V>
  nccl_request broadcast(const V& inout, int root) const {
    detail::require_rank(root, size_, "broadcast", "root");
    const auto b = checked(inout, "broadcast's buffer");
    const auto o = operation("ncclBroadcast", b, b.size);
    return issue(ncclBroadcast(b.data, b.data, n(b.size), type_of(b), root, comm(o), stream_), o);
  }
  /// Queues recv = `op` over the ranks of send, on `root`: recv is written on root only.
  template <class S, class R>
  nccl_request reduce(const S& send, const R& recv, reduction_op op, int root) const {
    detail::require_rank(root, size_, "reduce", "root");
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_same_size(s.size, r.size, "reduce", "send", "recv");
    const auto o = operation("ncclReduce", r, r.size, op);
    return issue(ncclReduce(s.data, r.data, n(r.size), type_of(r), detail::nccl_op(op), root, comm(o), stream_), o);
  }
  /// Queues sending `data` to rank `peer`. NCCL has no tags (the third argument is ignored): messages
  /// between two ranks arrive in the order sent.
  template <class V>
  nccl_request send(const V& data, int peer, int /*tag*/) const {
    detail::require_rank(peer, size_, "send", "peer");
    const auto d = checked(data, "send's buffer");
    const auto o = operation("ncclSend", d, d.size, std::nullopt, peer);
    return issue(ncclSend(d.data, n(d.size), type_of(d), peer, comm(o), stream_), o);
  }
  /// Queues receiving into `data` from rank `peer`; the tag is ignored, as send()'s.
  template <class V>
  nccl_request recv(const V& data, int peer, int /*tag*/) const {
    detail::require_rank(peer, size_, "recv", "peer");
    const auto d = checked(data, "recv's buffer");
    const auto o = operation("ncclRecv", d, d.size, std::nullopt, peer);
    return issue(ncclRecv(d.data, n(d.size), type_of(d), peer, comm(o), stream_), o);
  }

  /// Calls made while the returned object lives are issued together
  /// (ncclGroupStart/End); groups nest, and NCCL queues the calls when the
  /// outermost group of the thread ends. Their requests are done only after
  /// that: wait for them after the group's scope.
  class group_scope {
   public:
    /// Made by group(): starts an NCCL group (ncclGroupStart); the destructor ends it.
    explicit group_scope(std::shared_ptr<detail::nccl_state> state)
        : state_(std::move(state)), exceptions_(std::uncaught_exceptions()) {
      const nccl_operation op{"ncclGroupStart", state_->rank, -1};
      state_->require_usable(op);
      state_->check(ncclGroupStart(), op);
      ++detail::this_thread_nccl_group().depth;
    }
    group_scope(const group_scope&) = delete;
    group_scope& operator=(const group_scope&) = delete;
    ~group_scope() noexcept(false) {
      auto& group = detail::this_thread_nccl_group();
      const bool unwinding = std::uncaught_exceptions() > exceptions_;
      const ncclResult_t result = ncclGroupEnd();
      const nccl_operation end{"ncclGroupEnd", state_->rank, -1};
      if (--group.depth > 0) {  // an inner group: the outermost end queues the calls
        if (!unwinding) state_->check(result, end);
        return;
      }
      auto pending = std::exchange(group.pending, {});
      try {
        if (unwinding) throw nccl_error("fusor::comm::nccl: an exception left the group() first");
        state_->check(result, end);
        // Non-blocking communicators: the calls are queued once no communicator
        // of the group is ncclInProgress any more.
        state_->settle(end);
        for (auto& c : pending)
          if (c->state != state_) c->state->settle(end);
        for (auto& c : pending) c->record();
      } catch (const std::exception& e) {
        for (auto& c : pending)
          if (c->event == nullptr)
            c->failure = "fusor::comm::nccl: " + describe(c->op) + " was never queued: " + e.what();
        if (!unwinding) throw;
      }
    }

   private:
    std::shared_ptr<detail::nccl_state> state_;
    int exceptions_;
  };
  /// A group_scope: the calls made while it lives are issued together. Throws nccl_error on a moved-from
  /// communicator.
  [[nodiscard]] group_scope group() const {
    if (!state_) throw nccl_error("fusor::comm::nccl: group() on a communicator that was moved from");
    return group_scope(state_);
  }

 private:
  template <class V>
  static auto checked(const V& v, const char* what) {
    using view_t = std::remove_cvref_t<decltype(as_view(v))>;
    static_assert(std::is_same_v<typename view_t::space, device_space>,
                  "fusor: fusor::comm::nccl moves device memory (use fusor::comm::mpi for host memory)");
    return detail::flat(v, what);
  }
  template <class A, class B>
  static void same_type(const A&, const B&) {
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(*std::declval<A>().data)>, std::remove_cvref_t<decltype(*std::declval<B>().data)>>,
                  "fusor: fusor::comm: send and recv must hold the same element type");
  }
  template <class F>
  using element_of = std::remove_cvref_t<decltype(*std::declval<F>().data)>;
  template <class F>
  static ncclDataType_t type_of(const F&) {
    return detail::nccl_datatype<element_of<F>>();
  }
  static std::size_t n(index_t count) { return static_cast<std::size_t>(count); }
  // "ncclAllReduce #17 (4099 x bfloat16, sum)", with this rank and the peer, for
  // messages; collectives are numbered 1, 2, ... (the same on every rank that
  // issues the same calls), sends and receives not.
  template <class F>
  nccl_operation operation(const char* call, const F&, index_t count, std::optional<reduction_op> op = {},
                           int peer = -1) const {
    std::string text = call;
    if (peer < 0) text += " #" + std::to_string(++collectives_);
    text += " (" + std::to_string(count) + " x " + detail::nccl_type_name<element_of<F>>();
    if (op) text += std::string(", ") + name(*op);
    return {text + ")", rank_, peer};
  }
  // The communicator for a call, or nccl_error if it was aborted, finalized or moved from.
  ncclComm_t comm(const nccl_operation& op) const {
    if (!state_) throw nccl_error("fusor::comm::nccl: " + describe(op) + ": the communicator was moved from");
    state_->require_usable(op);
    return state_->comm;
  }
  // Outside a group the call is queued once NCCL is no longer in progress and
  // its request's event follows it; inside one, the outermost group end does both.
  nccl_request issue(ncclResult_t result, const nccl_operation& op) const {
    state_->check(result, op);
    auto completion = std::make_shared<detail::nccl_completion>(state_, op, stream_);
    if (auto& group = detail::this_thread_nccl_group(); group.depth > 0) {
      group.pending.push_back(completion);
    } else {
      state_->settle(op);
      completion->record();
    }
    return nccl_request(std::move(completion));
  }
  // A stream made on another device than this rank's cannot carry its calls.
  void require_stream_on_device() const {
#if CUDART_VERSION >= 12080
    if (stream_ == nullptr || stream_ == cudaStreamLegacy || stream_ == cudaStreamPerThread) return;
    int stream_device = -1;
    if (cudaStreamGetDevice(stream_, &stream_device) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (stream_device != device_)
      throw nccl_error("fusor::comm::nccl: rank " + std::to_string(rank_) + " (local rank " +
                       std::to_string(local_rank_) + ") uses CUDA device " + std::to_string(device_) +
                       ", but its stream was made on device " + std::to_string(stream_device) +
                       ": call fusor::comm::use_local_device(host) before making the stream");
#endif
  }

  std::shared_ptr<detail::nccl_state> state_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, device_ = 0;
  mutable std::int64_t collectives_ = 0;  // the last collective's number
  cudaStream_t stream_ = nullptr;
};

static_assert(communicator<nccl, device_space>);

}  // namespace fusor::comm

#endif  // FUSOR_HAS_CUDA
