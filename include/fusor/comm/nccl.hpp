// fusor/comm/nccl.hpp — the NCCL communicator: collectives over device memory,
// ordered on a CUDA stream. nvcc units only; link NCCL (libnccl, in the CUDA Toolkit here).
//
//   fusor::comm::mpi host;                                   // or single, for one GPU
//   auto gpus = fusor::comm::nccl::over(host, stream);      // rank 0 makes the id, host broadcasts it
//   gpus.all_reduce(gradients, fusor::comm::reduction_op::avg);  // queued on stream
//
// Each call is queued on the communicator's stream and returns an nccl_request
// (a CUDA event recorded after it): wait() blocks the host until it is done,
// test() asks; work queued later on the same stream needs no wait. NCCL reduces
// bf16 and fp16 itself, and has avg (ncclAvg). Point-to-point pairs that depend
// on each other (a ring) must be issued inside one group():
//   { auto g = gpus.group(); gpus.send(a, next, 0); gpus.recv(b, previous, 0); }
// Failed NCCL or CUDA calls throw nccl_error naming the call, the rank and NCCL's message.
// A communicator destroyed while an exception unwinds is aborted (ncclCommAbort),
// so a failing rank does not wait for the others (run_ranks then ends the job).
#pragma once

#include <fusor/config.hpp>

#if !FUSOR_HAS_CUDA
#error "fusor/comm/nccl.hpp needs a CUDA translation unit (nvcc)"
#else

#include <cuda_runtime.h>
#include <nccl.h>

#include <fusor/comm/communicator.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <utility>

namespace fusor::comm {

struct nccl_error : error {
  using error::error;
};

namespace detail {
inline void nccl_check(ncclResult_t result, const char* call, int rank) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  throw nccl_error(std::string("fusor::comm::nccl: ") + call + " failed on rank " + std::to_string(rank) + ": " +
                   ncclGetErrorString(result));
}
inline void nccl_cuda_check(cudaError_t status, const char* call, int rank) {
  if (status == cudaSuccess) return;
  throw nccl_error(std::string("fusor::comm::nccl: ") + call + " failed on rank " + std::to_string(rank) + ": " +
                   cudaGetErrorString(status));
}

template <class T>
ncclDataType_t nccl_datatype() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, bfloat16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, float16>) return ncclFloat16;
  else if constexpr (std::is_same_v<T, std::int8_t>) return ncclInt8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return ncclUint8;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return ncclUint32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  else static_assert(sizeof(T) == 0, "fusor: fusor::comm::nccl: this element type has no NCCL datatype");
}

inline ncclRedOp_t nccl_op(reduction_op op) {
  switch (op) {
    case reduction_op::sum: return ncclSum;
    case reduction_op::avg: return ncclAvg;
    case reduction_op::max: return ncclMax;
  }
  return ncclSum;
}
}  // namespace detail

// Done when the stream has reached the point where the call was queued.
class [[nodiscard]] nccl_request {
 public:
  nccl_request(cudaStream_t stream, int rank) : rank_(rank) {
    detail::nccl_cuda_check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate", rank);
    detail::nccl_cuda_check(cudaEventRecord(event_, stream), "cudaEventRecord", rank);
  }
  nccl_request(nccl_request&& o) noexcept : event_(std::exchange(o.event_, nullptr)), rank_(o.rank_) {}
  nccl_request& operator=(nccl_request&&) = delete;
  ~nccl_request() {
    if (event_) cudaEventDestroy(event_);
  }
  void wait() { detail::nccl_cuda_check(cudaEventSynchronize(event_), "cudaEventSynchronize", rank_); }
  bool test() {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    detail::nccl_cuda_check(status, "cudaEventQuery", rank_);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
  int rank_;
};

class nccl {
 public:
  // Rank `rank` of `size`, all made with the same id; local_rank picks the GPU
  // (cudaSetDevice) before the communicator is made.
  nccl(const ncclUniqueId& id, int rank, int size, int local_rank, cudaStream_t stream)
      : rank_(rank), size_(size), local_rank_(local_rank), stream_(stream) {
    detail::nccl_cuda_check(cudaSetDevice(local_rank), "cudaSetDevice", rank);
    detail::nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank", rank);
  }
  // Over a host communicator (mpi, or single for one GPU): rank 0 makes the id
  // and the host communicator broadcasts it.
  template <class Host>
  static nccl over(const Host& host, cudaStream_t stream) {
    ncclUniqueId id{};
    if (host.rank() == 0) detail::nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
    view<std::uint8_t, dextents<index_t, 1>> bytes(reinterpret_cast<std::uint8_t*>(id.internal), index_t{sizeof(id.internal)});
    host.broadcast(bytes, 0).wait();
    return nccl(id, host.rank(), host.size(), host.local_rank(), stream);
  }
  nccl(nccl&& o) noexcept
      : comm_(std::exchange(o.comm_, nullptr)), rank_(o.rank_), size_(o.size_), local_rank_(o.local_rank_),
        stream_(o.stream_) {}
  nccl(const nccl&) = delete;
  nccl& operator=(const nccl&) = delete;
  // While an exception unwinds (this rank is failing; run_ranks then aborts the
  // job), ncclCommAbort: it does not wait for collectives the other ranks will
  // never join, where ncclCommDestroy could hang.
  ~nccl() {
    if (!comm_) return;
    if (std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  cudaStream_t stream() const { return stream_; }
  ncclComm_t native() const { return comm_; }

  template <class S, class R>
  nccl_request all_reduce(const S& send, const R& recv, reduction_op op) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_same_size(s.size, r.size, "all_reduce", "send", "recv");
    return issue(ncclAllReduce(s.data, r.data, n(r.size), type_of(r), detail::nccl_op(op), comm_, stream_), "ncclAllReduce");
  }
  template <class V>
  nccl_request all_reduce(const V& inout, reduction_op op) const {
    return all_reduce(inout, inout, op);
  }
  template <class S, class R>
  nccl_request reduce_scatter(const S& send, const R& recv, reduction_op op) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_chunks(s.size, r.size, size_, "reduce_scatter", "send", "recv");
    return issue(ncclReduceScatter(s.data, r.data, n(r.size), type_of(r), detail::nccl_op(op), comm_, stream_),
                 "ncclReduceScatter");
  }
  // In place: chunk rank() of inout receives the reduction (recvbuff = sendbuff + rank * count).
  template <class V>
  nccl_request reduce_scatter(const V& inout, reduction_op op) const {
    const auto b = checked(inout, "reduce_scatter's buffer");
    detail::require_divisible(b.size, size_, "reduce_scatter");
    const index_t chunk = b.size / size_;
    return issue(ncclReduceScatter(b.data, b.data + chunk * rank_, n(chunk), type_of(b), detail::nccl_op(op), comm_,
                                   stream_),
                 "ncclReduceScatter");
  }
  template <class S, class R>
  nccl_request all_gather(const S& send, const R& recv) const {
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_chunks(r.size, s.size, size_, "all_gather", "recv", "send");
    return issue(ncclAllGather(s.data, r.data, n(s.size), type_of(s), comm_, stream_), "ncclAllGather");
  }
  // In place: this rank's chunk of inout (chunk rank() of size()) is its contribution.
  template <class V>
  nccl_request all_gather(const V& inout) const {
    const auto r = checked(inout, "all_gather's buffer");
    if (r.size % size_ != 0)
      throw shape_error("fusor::comm::all_gather: the in-place buffer has " + std::to_string(r.size) +
                        " elements, not a multiple of the " + std::to_string(size_) + " ranks");
    const index_t chunk = r.size / size_;
    return issue(ncclAllGather(r.data + chunk * rank_, r.data, n(chunk), type_of(r), comm_, stream_), "ncclAllGather");
  }
  template <class V>
  nccl_request broadcast(const V& inout, int root) const {
    detail::require_rank(root, size_, "broadcast", "root");
    const auto b = checked(inout, "broadcast's buffer");
    return issue(ncclBroadcast(b.data, b.data, n(b.size), type_of(b), root, comm_, stream_), "ncclBroadcast");
  }
  // recv is written on root only.
  template <class S, class R>
  nccl_request reduce(const S& send, const R& recv, reduction_op op, int root) const {
    detail::require_rank(root, size_, "reduce", "root");
    const auto s = checked(send, "send");
    const auto r = checked(recv, "recv");
    same_type(s, r);
    detail::require_same_size(s.size, r.size, "reduce", "send", "recv");
    return issue(ncclReduce(s.data, r.data, n(r.size), type_of(r), detail::nccl_op(op), root, comm_, stream_),
                 "ncclReduce");
  }
  // NCCL has no tags: messages between two ranks arrive in the order sent.
  template <class V>
  nccl_request send(const V& data, int peer, int /*tag*/) const {
    detail::require_rank(peer, size_, "send", "peer");
    const auto d = checked(data, "send's buffer");
    return issue(ncclSend(d.data, n(d.size), type_of(d), peer, comm_, stream_), "ncclSend");
  }
  template <class V>
  nccl_request recv(const V& data, int peer, int /*tag*/) const {
    detail::require_rank(peer, size_, "recv", "peer");
    const auto d = checked(data, "recv's buffer");
    return issue(ncclRecv(d.data, n(d.size), type_of(d), peer, comm_, stream_), "ncclRecv");
  }

  // Calls made while the returned object lives are issued together (ncclGroupStart/End).
  class group_scope {
   public:
    explicit group_scope(int rank) : rank_(rank) { detail::nccl_check(ncclGroupStart(), "ncclGroupStart", rank); }
    group_scope(const group_scope&) = delete;
    group_scope& operator=(const group_scope&) = delete;
    ~group_scope() noexcept(false) {
      const ncclResult_t result = ncclGroupEnd();
      if (std::uncaught_exceptions() == 0) detail::nccl_check(result, "ncclGroupEnd", rank_);
    }

   private:
    int rank_;
  };
  [[nodiscard]] group_scope group() const { return group_scope(rank_); }

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
  static ncclDataType_t type_of(const F& f) {
    return detail::nccl_datatype<std::remove_cvref_t<decltype(*f.data)>>();
  }
  static std::size_t n(index_t count) { return static_cast<std::size_t>(count); }
  nccl_request issue(ncclResult_t result, const char* call) const {
    detail::nccl_check(result, call, rank_);
    return nccl_request(stream_, rank_);
  }

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  cudaStream_t stream_ = nullptr;
};

static_assert(communicator<nccl, device_space>);

}  // namespace fusor::comm

#endif  // FUSOR_HAS_CUDA
