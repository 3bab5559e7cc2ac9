// fusor/parallel/rank_numbers.hpp — a few host numbers that the ranks of a
// communicator exchange: loss totals, and the checks that every rank agrees
// (the same global batch, the same micro-batches, a save or load that no rank
// refused).
//
// The numbers travel through a three-element buffer in the memory the
// communicator moves: the trainer's memory (`Space`) for a stream-ordered
// communicator (NCCL), the host's otherwise (MPI, even beside GPUs). A trainer
// owns one, so that a step allocates nothing. Every call is a collective: every
// rank calls it, and it returns when the numbers have arrived.
//
//   detail::rank_numbers<space, comm::mpi> numbers(world);
//   if (const rank_range r = numbers.range(world, double(batch)); !r.same()) throw ...;
//   if (numbers.count(world, !failure.empty()) > 0) throw ...;
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "fusor/comm/communicator.hpp"
#include "fusor/config.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/parallel/stream_order.hpp"

namespace fusor::parallel {

/// The least and the most of one number over the ranks.
struct rank_range {
  double least = 0;  ///< The smallest over the ranks.
  double most = 0;   ///< The largest over the ranks.
  /// Every rank passed the same number.
  bool same() const { return least == most; }
};

namespace detail {

template <class Space, class Communicator>
class rank_numbers {
 public:
  static constexpr index_t capacity = 4;  // the loss totals: loss, correct, rows, labels outside
  using buffer_space = std::conditional_t<stream_ordered<Communicator>, Space, host_space>;

  /// The buffer allocated in the order of `stream` (a trainer's), and that allocation waited for: the buffer is
  /// used on the communicator's stream, which does not follow `stream` (a pipeline checks its stages at once).
  explicit rank_numbers(stream_t stream) : buffer_(dextents<index_t, 1>(capacity), stream) {
#if FUSOR_HAS_CUDA
    if constexpr (buffer_space::device_accessible) FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream));
#endif
  }
  /// The buffer allocated in the order of `world`'s stream, where it has one (a checkpoint's checks).
  explicit rank_numbers(const Communicator& world) : rank_numbers(stream_of(world)) {}

  /// `values` (this rank's) reduced over the ranks with `op`, in place.
  template <std::size_t N>
    requires(N <= std::size_t(capacity))
  void all_reduce(Communicator& world, double (&values)[N], comm::reduction_op op) {
    exchange(world, std::span<double>(values), buffer_.data(),
             [&](const auto& moved) { world.all_reduce(moved, op).wait(); });
  }
  /// Any number of values, through a buffer made for the call: for checks outside a step (a checkpoint's names).
  void all_reduce(Communicator& world, std::span<double> values, comm::reduction_op op) {
    if (values.empty()) return;
    tensor<double, dextents<index_t, 1>, row_major, buffer_space> buffer{dextents<index_t, 1>(index_t(values.size())),
                                                                          stream_of(world)};
    exchange(world, values, buffer.data(), [&](const auto& moved) { world.all_reduce(moved, op).wait(); });
  }
  /// `values` replaced by rank `root`'s, on every rank.
  template <std::size_t N>
    requires(N <= std::size_t(capacity))
  void broadcast(Communicator& world, double (&values)[N], int root) {
    exchange(world, std::span<double>(values), buffer_.data(),
             [&](const auto& moved) { world.broadcast(moved, root).wait(); });
  }
  /// The least and the most of `mine` over the ranks (one all-reduce of the maxima of `mine` and `-mine`).
  rank_range range(Communicator& world, double mine) {
    double extremes[2] = {mine, -mine};
    all_reduce(world, extremes, comm::reduction_op::max);
    return {-extremes[1], extremes[0]};
  }
  /// How many ranks pass `failed` = true.
  int count(Communicator& world, bool failed) {
    double n[1] = {failed ? 1.0 : 0.0};
    all_reduce(world, n, comm::reduction_op::sum);
    return static_cast<int>(n[0] + 0.5);
  }
  /// "; rank R: <its failure>" for the lowest rank R that passes a non-empty `failure`, on every rank (and
  /// "; this rank: <failure>" where this rank failed too), so that a job that logs one rank still reads the
  /// cause; empty where no rank failed. A collective: every rank calls it after count() said some failed.
  std::string failure_note(Communicator& world, const std::string& failure) {
    const int rank = world.rank(), size = world.size();
    const int first = static_cast<int>(range(world, failure.empty() ? double(size) : double(rank)).least);
    if (first >= size) return {};
    double length[1] = {rank == first ? double(failure.size()) : 0.0};
    all_reduce(world, length, comm::reduction_op::sum);
    std::vector<double> text(static_cast<std::size_t>(length[0] + 0.5), 0.0);  // the characters, summed from one rank
    if (rank == first)
      for (std::size_t i = 0; i < text.size(); ++i) text[i] = double(static_cast<unsigned char>(failure[i]));
    all_reduce(world, std::span<double>(text), comm::reduction_op::sum);
    std::string reason(text.size(), ' ');
    for (std::size_t i = 0; i < text.size(); ++i) reason[i] = static_cast<char>(static_cast<int>(text[i] + 0.5));
    std::string note = "; rank " + std::to_string(first) + ": " + reason;
    if (!failure.empty() && rank != first) note += "; this rank: " + failure;
    return note;
  }

 private:
  static stream_t stream_of([[maybe_unused]] const Communicator& world) {
    if constexpr (stream_ordered<Communicator>) return world.stream();
    else return stream_t{};
  }
  // Host numbers to `buffer` (at least values.size() elements, in buffer_space), `collective` on them there, back
  // to the host. A stream-ordered communicator gets the copies on its own stream, then the host waits for that
  // stream only.
  template <class Collective>
  void exchange([[maybe_unused]] Communicator& world, std::span<double> values, double* buffer,
                Collective&& collective) {
    const index_t n = index_t(values.size());
    const view<double, dextents<index_t, 1>, row_major, host_space> host(values.data(), n);
    const view<double, dextents<index_t, 1>, row_major, buffer_space> moved(buffer, n);
    if constexpr (stream_ordered<Communicator>) {
#if FUSOR_HAS_CUDA
      copy_async(moved, host, world.stream());
      collective(moved);
      copy_async(host, moved, world.stream());
      FUSOR_CUDA_CHECK(cudaStreamSynchronize(world.stream()));
#endif
    } else {
      copy(moved, host);
      collective(moved);
      copy(host, moved);
    }
  }

  tensor<double, dextents<index_t, 1>, row_major, buffer_space> buffer_;
};

}  // namespace detail
}  // namespace fusor::parallel
