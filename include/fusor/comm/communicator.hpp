// fusor/comm/communicator.hpp — what every communicator provides, whatever carries the bytes.
//
// A communicator is a group of ranks that exchange tensors. Policies:
//   fusor::comm::single (fusor/comm/single.hpp) — one rank, no dependency; collectives are copies.
//   fusor::comm::mpi    (fusor/comm/mpi.hpp)    — MPI over host memory; link fusor::mpi.
//   fusor::comm::nccl   (fusor/comm/nccl.hpp)   — NCCL over device memory (nvcc units; link nccl).
// Each takes contiguous views (fusor::view or tensors, any rank, read as flat arrays)
// and returns a request: `wait()` blocks until the buffers may be read and reused,
// `test()` says whether it has finished. A request that is destroyed unwaited waits.
//
//   c.rank(); c.size(); c.local_rank();                   // rank among all, count, rank on this machine
//   c.all_reduce(send, recv, reduction_op::sum).wait();   // recv = op over ranks of send
//   c.all_reduce(inout, reduction_op::avg).wait();        // in place
//   c.reduce_scatter(send, recv, op);                     // recv = this rank's chunk of the reduction;
//                                                         //   send.size() == recv.size() * size()
//   c.reduce_scatter(inout, op);                          // in place: chunk rank() of inout receives it
//   c.all_gather(send, recv); c.all_gather(inout);        // recv = every rank's send, in rank order
//   c.broadcast(inout, root);                             // inout = root's inout
//   c.reduce(send, recv, op, root);                       // recv (root only) = op over ranks of send
//   c.send(view, peer, tag); c.recv(view, peer, tag);     // point to point
//   { auto g = c.group(); c.send(a, next, 0); c.recv(b, previous, 0); }  // issued together
//   auto part = c.split(color, key);                      // the ranks of one color, ordered by key
//                                                         //   (mpi, single; parallel/mesh.hpp uses it)
//
// Sizes that do not agree throw fusor::shape_error naming both; a bad rank or root
// throws fusor::error.
#pragma once

#include <fusor/core/error.hpp>
#include <fusor/core/copy.hpp>
#include <fusor/core/view.hpp>

#include <concepts>
#include <cstddef>
#include <string>

namespace fusor::comm {

/// How a collective combines the ranks' values: their sum, their mean or their maximum.
enum class reduction_op { sum, avg, max };

/// The operation's name: "sum", "avg" or "max".
inline const char* name(reduction_op op) {
  switch (op) {
    case reduction_op::sum: return "sum";
    case reduction_op::avg: return "avg";
    case reduction_op::max: return "max";
  }
  return "?";
}

/// What a collective returns: wait() for it, or ask test() whether it is done.
template <class R>
concept request = requires(R& r) {
  r.wait();
  { r.test() } -> std::convertible_to<bool>;
};

/// What group() returns where calls need no grouping (single, mpi: non-blocking
/// calls may all be in flight at once); nccl's issues its calls together.
struct [[nodiscard]] no_group {};

/// A request that is complete when made (the single communicator's).
struct completed_request {
  /// Returns at once: the work is already done.
  void wait() {}
  /// Always true.
  bool test() const { return true; }
};

namespace detail {

// A view's elements as one flat array; communicators move bytes, so gaps are refused.
template <class V>
auto flat(const V& v, const char* what) {
  const auto& view = as_view(v);
  if (!view.is_contiguous())
    throw shape_error(std::string("fusor::comm: ") + what + " must be contiguous (no gaps), its layout has gaps");
  struct flat_view {
    decltype(view.data()) data;
    index_t size;
  };
  return flat_view{view.data(), view.size()};
}

inline void require_same_size(index_t a, index_t b, const char* call, const char* a_name, const char* b_name) {
  if (a != b)
    throw shape_error(std::string("fusor::comm::") + call + ": " + a_name + " has " + std::to_string(a) +
                      " elements but " + b_name + " has " + std::to_string(b));
}

// reduce_scatter and all_gather: the whole is `ranks` chunks of the part.
inline void require_chunks(index_t whole, index_t part, int ranks, const char* call, const char* whole_name,
                           const char* part_name) {
  if (whole != part * ranks)
    throw shape_error(std::string("fusor::comm::") + call + ": " + whole_name + " has " + std::to_string(whole) +
                      " elements, " + part_name + " has " + std::to_string(part) + " and there are " +
                      std::to_string(ranks) + " ranks (" + whole_name + " needs " + part_name + " * ranks = " +
                      std::to_string(part * ranks) + ")");
}

// In-place reduce_scatter and all_gather: the buffer is `ranks` equal chunks.
inline void require_divisible(index_t size, int ranks, const char* call) {
  if (size % ranks != 0)
    throw shape_error(std::string("fusor::comm::") + call + ": the in-place buffer has " + std::to_string(size) +
                      " elements, not a multiple of the " + std::to_string(ranks) + " ranks");
}

inline void require_rank(int r, int size, const char* call, const char* what) {
  if (r < 0 || r >= size)
    throw error(std::string("fusor::comm::") + call + ": " + what + " " + std::to_string(r) + " is not a rank of " +
                std::to_string(size));
}

}  // namespace detail

/// What every communicator policy offers, checked with fp32 views of the memory
/// it moves (host memory for single and mpi, device memory for nccl).
template <class C, class Space = host_space>
concept communicator = requires(C& c, view<fp32, dextents<index_t, 1>, row_major, Space> v, int peer) {
  { c.rank() } -> std::convertible_to<int>;
  { c.size() } -> std::convertible_to<int>;
  { c.local_rank() } -> std::convertible_to<int>;
  { c.all_reduce(v, v, reduction_op::sum) } -> request;
  { c.all_reduce(v, reduction_op::sum) } -> request;
  { c.reduce_scatter(v, v, reduction_op::sum) } -> request;
  { c.reduce_scatter(v, reduction_op::sum) } -> request;
  { c.all_gather(v, v) } -> request;
  { c.all_gather(v) } -> request;
  { c.broadcast(v, peer) } -> request;
  { c.reduce(v, v, reduction_op::sum, peer) } -> request;
  { c.send(v, peer, 0) } -> request;
  { c.recv(v, peer, 0) } -> request;
  c.group();
};

}  // namespace fusor::comm
