// fusor/comm/single.hpp — the communicator of one rank: no dependency, nothing to wait for.
//
// Code written against fusor::comm::communicator runs unchanged on one process:
// every collective over one rank is a copy (sum, avg and max of one value are the
// value), broadcast leaves its buffer as it is, and each returns a completed request.
// There is no peer to send to, so send and recv throw fusor::error. Host memory
// only (device views do not compile; one GPU: fusor::comm::nccl over single).
#pragma once

#include <fusor/comm/communicator.hpp>

#include <algorithm>
#include <string>

/// The message of device memory given to fusor::comm::single (one string literal, for static_assert).
#define FUSOR_SINGLE_HOST_MEMORY_MESSAGE \
  "fusor: fusor::comm::single copies host memory: give it host_space views, or use fusor::comm::nccl for device memory"

namespace fusor::comm {

/// The communicator of one rank (host memory): each collective is a copy or nothing, and returns a
/// completed_request; send and recv throw fusor::error.
class single {
 public:
  /// Always 0.
  int rank() const { return 0; }
  /// Always 1.
  int size() const { return 1; }
  /// Always 0.
  int local_rank() const { return 0; }
  /// Any split of one rank is that rank.
  single split(int /*color*/, int /*key*/) const { return {}; }

  /// Copies send into recv (the same size and element type): the reduction over one rank.
  template <class S, class R>
  completed_request all_reduce(const S& send, const R& recv, reduction_op) const {
    static_assert(host_memory_v<S, R>, FUSOR_SINGLE_HOST_MEMORY_MESSAGE);
    if constexpr (host_memory_v<S, R>) copy_flat(send, recv, "all_reduce");
    return {};
  }
  /// Leaves inout as it is: the reduction over one rank.
  template <class V>
  completed_request all_reduce(const V& inout, reduction_op) const {
    detail::flat(inout, "all_reduce's buffer");
    return {};
  }
  /// Copies send into recv: with one rank, recv is the whole reduction.
  template <class S, class R>
  completed_request reduce_scatter(const S& send, const R& recv, reduction_op) const {
    static_assert(host_memory_v<S, R>, FUSOR_SINGLE_HOST_MEMORY_MESSAGE);
    if constexpr (host_memory_v<S, R>) {
      detail::require_chunks(detail::flat(send, "send").size, detail::flat(recv, "recv").size, 1, "reduce_scatter",
                             "send", "recv");
      copy_flat(send, recv, "reduce_scatter");
    }
    return {};
  }
  /// In place: with one rank the whole buffer is its chunk, already reduced.
  template <class V>
  completed_request reduce_scatter(const V& inout, reduction_op) const {
    detail::flat(inout, "reduce_scatter's buffer");
    return {};
  }
  /// Copies send into recv: with one rank, the gather is send itself.
  template <class S, class R>
  completed_request all_gather(const S& send, const R& recv) const {
    static_assert(host_memory_v<S, R>, FUSOR_SINGLE_HOST_MEMORY_MESSAGE);
    if constexpr (host_memory_v<S, R>) {
      detail::require_chunks(detail::flat(recv, "recv").size, detail::flat(send, "send").size, 1, "all_gather",
                             "recv", "send");
      copy_flat(send, recv, "all_gather");
    }
    return {};
  }
  /// In place: with one rank the whole buffer is its own chunk, left as it is.
  template <class V>
  completed_request all_gather(const V& inout) const {
    detail::flat(inout, "all_gather's buffer");
    return {};
  }
  /// Leaves inout as it is; throws fusor::error unless `root` is 0.
  template <class V>
  completed_request broadcast(const V& inout, int root) const {
    detail::require_rank(root, 1, "broadcast", "root");
    detail::flat(inout, "broadcast's buffer");
    return {};
  }
  /// Copies send into recv; throws fusor::error unless `root` is 0.
  template <class S, class R>
  completed_request reduce(const S& send, const R& recv, reduction_op, int root) const {
    static_assert(host_memory_v<S, R>, FUSOR_SINGLE_HOST_MEMORY_MESSAGE);
    detail::require_rank(root, 1, "reduce", "root");
    if constexpr (host_memory_v<S, R>) copy_flat(send, recv, "reduce");
    return {};
  }
  /// Throws fusor::error: one rank has no peer to send to.
  template <class V>
  completed_request send(const V&, int peer, int) const {
    throw error("fusor::comm::single::send: one rank has no peer to send to (peer " + std::to_string(peer) + ")");
  }
  /// Throws fusor::error: one rank has no peer to receive from.
  template <class V>
  completed_request recv(const V&, int peer, int) const {
    throw error("fusor::comm::single::recv: one rank has no peer to receive from (peer " + std::to_string(peer) + ")");
  }

  /// Nothing to group.
  no_group group() const { return {}; }

 private:
  template <class S, class R>
  static void copy_flat(const S& send, const R& recv, const char* call) {
    host_only<S>();
    host_only<R>();
    const auto s = detail::flat(send, "send");
    const auto r = detail::flat(recv, "recv");
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(*s.data)>, std::remove_cvref_t<decltype(*r.data)>>,
                  "fusor: fusor::comm: send and recv must hold the same element type");
    detail::require_same_size(s.size, r.size, call, "send", "recv");
    if (s.data != r.data) std::copy(s.data, s.data + s.size, r.data);
  }
  // Whether every one of V... (views or tensors) is outside device memory. Each copying collective
  // static_asserts it first, so the message points at the caller's line, and copy_flat again.
  template <class V>
  using space_of = typename std::remove_cvref_t<decltype(as_view(std::declval<const V&>()))>::space;
  template <class... V>
  static constexpr bool host_memory_v = (!std::is_same_v<space_of<V>, device_space> && ...);
  template <class V>
  static void host_only() {
    static_assert(host_memory_v<V>, FUSOR_SINGLE_HOST_MEMORY_MESSAGE);
  }
};

static_assert(communicator<single>);

}  // namespace fusor::comm
