// fusor/parallel/tensor_parallel_norm.hpp — this rank's share of the global
// squared gradient norm of a tensor-parallel network, so that one all-reduce
// (sum) of the shares gives every rank the same global norm.
//
// A rank holds two kinds of gradients: the slices of split parameters (a
// column-parallel layer's weight and bias, a row-parallel layer's weight: a
// parameter_spec with a shard of more than one way), whose squares the ranks
// must add up, and the replicated ones (every unsplit layer's, a row-parallel
// layer's bias), the same on every rank, which must count once. With n ranks,
// s this rank's split squares and r the replicated squares, the trainer's norm
// is s + r; the share is s + r / n = norm - (1 - 1/n) r, and the shares sum to
// (sum of every s) + r. r is summed over the replicated ranges of each group's
// gradient buffer, found once from the layers' parameter specs.
//
// On the GPU it is one sum-of-squares launch per replicated range and two
// one-thread tasks on the step's stream: nothing is read on the host, nothing
// allocated after the first step, so a step stays capturable as a CUDA graph.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/buffer.hpp"
#include "fusor/core/error.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/nn/sharding.hpp"
#include "fusor/optim/gradient_norm.hpp"
#include "fusor/optim/scalar_operand.hpp"

namespace fusor::parallel {

namespace detail {
struct clear_task {
  double* value;
  FUSOR_HOST_DEVICE void operator()() const { *value = 0.0; }
};
// norm^2 -= (1 - 1/n) r: an Inf or NaN anywhere stays non-finite.
struct share_task {
  double* norm_squared;
  const double* replicated_squared;
  double excess;  // 1 - 1/n
  FUSOR_HOST_DEVICE void operator()() const { *norm_squared -= excess * *replicated_squared; }
};
}  // namespace detail

/// This rank's share of a tensor-parallel network's global squared gradient norm: the split gradients'
/// squares and 1/n of the replicated ones', so that one all-reduce (sum) of the shares gives the global norm.
template <class Space>
class tensor_parallel_norm {
 public:
  /// Finds the replicated ranges of `network`'s gradient buffers: everything but
  /// the slots of split parameters (names "<layer>.<parameter>").
  template <class Network>
  explicit tensor_parallel_norm(Network& network) {
    std::set<std::string> split;
    std::size_t position = 0;
    network.for_each_layer([&](auto& layer) {
      for (const nn::parameter_spec& spec : std::remove_cvref_t<decltype(layer)>::parameters())
        if (spec.shard.axis >= 0 && spec.shard.ways > 1) split.insert(std::to_string(position) + "." + spec.name);
      ++position;
    });
    network.for_each_group([&](auto& group) {
      std::vector<std::pair<index_t, index_t>> ranges;
      index_t begin = 0;
      for (const nn::parameter_slot& slot : group.slots()) {
        if (!split.contains(slot.name)) continue;
        if (slot.offset > begin) ranges.emplace_back(begin, slot.offset);
        begin = slot.offset + slot.size;
        split_elements_ += slot.size;
      }
      if (group.size() > begin) ranges.emplace_back(begin, group.size());
      replicated_ranges_.push_back(std::move(ranges));
    });
  }

  /// norm_squared (this rank's whole sum of squares) becomes this rank's share
  /// over `ranks` ranks, on the executor's stream.
  template <class Network, class Executor>
  void share(Network& network, double* norm_squared, int ranks, const Executor& ex) {
    if (replicated_.data() == nullptr) {  // the first step: made on its stream, so ordered before their use
      const stream_t stream = nn::executor_stream(ex);
      workspace_.emplace(stream);
      replicated_ = buffer<Space>(sizeof(double), stream);
    }
    double* replicated = replicated_.template as<double>();
    optim::run_task(detail::clear_task{replicated}, ex);
    std::size_t k = 0;
    network.for_each_group([&](auto& group) {
      using element = typename std::remove_cvref_t<decltype(group)>::element_type;
      const auto gradients = group.gradients();
      for (const auto& [begin, end] : replicated_ranges_.at(k))
        optim::add_sum_of_squares(replicated, nn::flat_view<element, Space>(gradients.data() + begin, end - begin),
                                  *workspace_, ex);
      ++k;
    });
    optim::run_task(detail::share_task{norm_squared, replicated, 1.0 - 1.0 / double(ranks)}, ex);
  }

  /// Where the replicated gradients lie in each group's buffer, groups in the
  /// network's order: [begin, end) offsets.
  const std::vector<std::vector<std::pair<index_t, index_t>>>& replicated_ranges() const { return replicated_ranges_; }
  /// How many gradient elements of this rank are slices of split parameters.
  index_t split_elements() const { return split_elements_; }

 private:
  std::vector<std::vector<std::pair<index_t, index_t>>> replicated_ranges_;
  index_t split_elements_ = 0;
  std::optional<optim::gradient_norm_workspace<Space>> workspace_;
  buffer<Space> replicated_;
};

}  // namespace fusor::parallel
