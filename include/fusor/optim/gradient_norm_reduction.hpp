// fusor/optim/gradient_norm_reduction.hpp — where optim::trainer lets model
// parallelism make the gradient norm global.
//
// The trainer sums the squares of the gradients this rank holds. When a
// network's layers are split across ranks (tensor parallelism) that is part of
// the norm only, and ranks that clip or skip by their own part take different
// decisions, so the parameters every rank holds whole drift apart. A
// gradient_norm_reduction turns this rank's squared norm into the global one
// before the decisions read it:
//
//   parallel::tensor_parallel tp(net, communicator);       // implements it
//   optim::trainer<decltype(net), optim::adamw> train(net, {.clip = {.max_norm = 1}}, adamw_options);
//   train.reduce_gradient_norm_with(tp);                   // every rank: the same norm, the same decisions
//
// optim knows no communicator: the implementation (fusor/parallel) does.
#pragma once

#include <utility>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

/// Turns this rank's squared gradient norm into the whole model's, for a trainer whose network is split
/// across ranks; implemented in fusor/parallel (parallel::tensor_parallel).
template <class Space>
class gradient_norm_reduction {
 public:
  virtual ~gradient_norm_reduction() = default;
  /// `norm_squared` holds the sum of squares of this rank's gradients (as
  /// stored: scaled by the loss scale); on return it must hold, on every rank,
  /// that of the whole model's gradients, each counted once. Ordered on
  /// `stream` ({} on the host) like the trainer's other work: it may be queued
  /// there and not yet done when it returns, but must not be read on the host.
  virtual void reduce(scalar_view<double, Space> norm_squared, stream_t stream) = 0;

  /// The gradients that are the same on every rank, which a trainer summing its shares itself counts once.
  /// For a trainer that holds the reduced gradients elsewhere than the
  /// network's buffers (ZeRO-1's shards, parallel::data_parallel): it sums
  /// each rank's share itself — the gradients split over the ranks, and the
  /// replicated ones (the same on every rank) where `counted_here` only — then
  /// calls sum_shares, a plain sum over the ranks. replicated() returning nullptr: not offered.
  struct replicated_gradients {
    std::vector<std::vector<std::pair<index_t, index_t>>> ranges;  ///< per parameter group: [begin, end) offsets
    bool counted_here = false;                                     ///< this rank counts them (one rank does)
  };
  /// The replicated gradients for a trainer that sums shares itself, or nullptr (the default): not offered.
  virtual const replicated_gradients* replicated() const { return nullptr; }
  /// Sums `norm_squared`, this rank's share, over the ranks, ordered on `stream` as reduce() is.
  /// The default throws fusor::error, for reductions that offer no replicated().
  virtual void sum_shares(scalar_view<double, Space> /*norm_squared*/, stream_t /*stream*/) {
    throw error("fusor::optim::gradient_norm_reduction: this reduction cannot sum shares a trainer made itself");
  }
};

}  // namespace fusor::optim
