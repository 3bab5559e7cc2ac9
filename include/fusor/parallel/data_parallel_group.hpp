// fusor/parallel/data_parallel_group.hpp — one parameter group's part of a
// data-parallel step (parallel/data_parallel.hpp drives it): its buckets, the
// buffers communication needs, the fp32 sum of micro-batches, the ZeRO-1 shard
// and the group's optimizer.
//
// Per step, for a group of element type E communicated as C (E, or bf16):
//   micro-batches before the last: accumulation = g (first) or accumulation + g, one pass each;
//   each bucket, once ready: one pass (or none) into the communication buffer —
//     g itself when C is E and nothing is padded and no micro-batches were summed,
//     else accumulation + g or g converted to C — then its collective:
//     all_reduce (sum) in place, or ZeRO-1's reduce_scatter into this rank's shard;
//   the optimizer reads the communicated C values directly (no pass back to E)
//   and updates every parameter, or, under ZeRO-1, this rank's shard of them,
//   which all_gather then brings to every rank: in place, where no bucket
//   needed padding and the optimizer steps in parts (adamw, sgd: this rank's
//   chunk of each bucket where it lies in the network's buffer), else from a
//   packed parameter shard through a padded staging buffer.
// ZeRO-2 (shard_gradients) keeps no gradient buffer of the group's size: bucket
// k's layers write their gradients into slab k % 2 (lent to the group before
// backward reaches them), the reduce_scatter reads the slab, and the slab is
// lent to bucket k + 2 once that collective is done; micro-batches are each
// reduce-scattered and summed in fp32 over this rank's shard.
// ZeRO-3 (shard_parameters) keeps no parameter buffer either: the optimizer
// updates this rank's shard, and bucket k's parameters are all-gathered into
// value slab k % 2 before its layers run (data_parallel orders the gathers).
// The average over ranks and micro-batches costs no pass: the loss's gradient
// is scaled by 1 / (ranks x micro_batches) before backward.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/comm/communicator.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/optim/flat_state.hpp"
#include "fusor/optim/state_layout.hpp"
#include "fusor/optim/step_scalars.hpp"
#include "fusor/parallel/data_parallel_options.hpp"
#include "fusor/parallel/gradient_buckets.hpp"
#include "fusor/parallel/powersgd.hpp"
#include "fusor/parallel/stream_order.hpp"

namespace fusor::parallel {

namespace detail {
template <class P, class Space>
optim::flat_view<P, Space> part(const optim::flat_view<P, Space>& v, index_t begin, index_t end) {
  return {v.data() + begin, end - begin};
}
template <class T, class Space>
index_t bytes_of(const optim::flat_tensor<T, Space>& t) {
  return t.size() * index_t(sizeof(T));
}
}  // namespace detail

/// One parameter group's part of a data-parallel step (data_parallel and pipeline drive it): its buckets, the
/// buffers communication needs, the fp32 sum of micro-batches, the ZeRO shards and the group's optimizer.
template <class Element, class Space, template <class, class> class Optimizer>
class data_parallel_group {
 public:
  using element_type = Element;                      ///< the group's parameter and gradient element type
  using accumulation_type = compute_t<Element>;      ///< element type of the micro-batches' sum (fp32 for 16-bit)
  using optimizer_type = Optimizer<Element, Space>;  ///< the group's optimizer

 private:
  // The buffers of one communicated element type C.
  template <class C>
  struct communicated {
    optim::flat_tensor<C, Space> owned;  // empty where the gradients themselves are communicated
    optim::flat_view<C, Space> buffer;   // the communication layout
    optim::flat_tensor<C, Space> shard;  // ZeRO-1: this rank's reduced chunks
    std::array<optim::flat_tensor<C, Space>, 2> slabs;  // ZeRO-2 with bf16 communication: the slabs converted
  };

 public:
  /// Plans `group`'s buckets from `reverse_layers` over `ranks` ranks (this one `rank`) and makes the buffers
  /// and optimizer `options` call for, on `stream`. Throws fusor::error for ZeRO-3 with tied parameters, or
  /// layer ranges that do not cover the group.
  template <class OptimizerOptions>
  data_parallel_group(nn::parameter_group<Element, Space>& group, const std::vector<layer_range>& reverse_layers,
                      int ranks, int rank, const data_parallel_options& options, const OptimizerOptions& optimizer_options,
                      stream_t stream)
      : group_(&group),
        ranks_(ranks),
        rank_(rank),
        narrow_(options.communication == gradient_communication::bf16 && !std::is_same_v<Element, bfloat16>),
        zero_(options.shard_optimizer_state || options.shard_gradients || options.shard_parameters),
        lend_(options.shard_gradients || options.shard_parameters),
        gather_(options.shard_parameters),
        accumulating_(options.micro_batches > 1),
        plan_(plan_buckets(reverse_layers, narrow_ ? index_t{2} : index_t{sizeof(Element)}, options.bucket_bytes,
                           zero_ ? ranks : 1)),
        optimizer_(zero_ ? plan_.shard_size() : group.size(), optimizer_options, stream),
        in_place_(zero_ && !gather_ && !plan_.padded() && steps_in_parts) {
    if (gather_ && !group.tied_slots().empty())
      throw error("fusor::parallel::data_parallel: parameter " + group.tied_slots().front().slot.name + " is tied to " +
                  group.tied_slots().front().owner +
                  "; ZeRO-3 (shard_parameters) gathers each bucket's parameters only while its own layers run, so "
                  "tied parameters need ZeRO-2 or less");
    if (options.communication == gradient_communication::powersgd) compressor_.emplace(group, options.powersgd, stream);
    if (plan_.size != group.size())
      throw error("fusor::parallel::data_parallel: the layers' parameters cover " + std::to_string(plan_.size) +
                  " elements of a group of " + std::to_string(group.size()));
    if (lend_) lend_slabs(group, stream);
    else if (accumulating_) accumulation_ = optim::detail::zero_tensor<accumulation_type, Space>(group.size(), stream);
    if (narrow_) make(narrow_buffers_, stream);
    else make(native_buffers_, stream);
    if (zero_ && !in_place_) {
      shard_values_ = optim::detail::zero_tensor<Element, Space>(plan_.shard_size(), stream);
      if (plan_.padded() && !gather_) staging_ = optim::detail::zero_tensor<Element, Space>(plan_.padded_size, stream);
    }
    if (gather_)
      for (std::size_t i = 0; i != 2; ++i) value_slabs_[i] = optim::detail::zero_tensor<Element, Space>(slabs_[i].size(), stream);
  }

  /// How the group's gradient buffer is cut into buckets.
  const bucket_plan& plan() const { return plan_; }
  /// The group's optimizer: its state covers the group, or this rank's shard under ZeRO.
  optimizer_type& optimizer() { return optimizer_; }
  /// Bytes bucket k hands to its collective: its padded size in the communicated element type.
  index_t communicated_bytes(std::size_t k) const {
    return plan_.buckets[k].padded_size * (narrow_ ? index_t{2} : index_t{sizeof(Element)});
  }

  /// The optimizer's starting state from the parameters (after they were made
  /// equal on every rank); under ZeRO-1 this rank's chunk of every bucket first
  /// becomes its parameter shard (padding zero), on the executor's stream.
  template <class Executor>
  void initialize(const Executor& ex) {
    if (!zero_) return optimizer_.initialize(group_->values(), ex);
    if (in_place_) {  // the shard gathered for the optimizer's master weights, then dropped
      auto shard = optim::detail::zero_tensor<Element, Space>(plan_.shard_size(), executor_stream(ex));
      copy_shard(shard.view(), ex);
      optimizer_.initialize(shard.view(), ex);
      return wait_for(ex);
    }
    take_parameter_shard(ex);
    optimizer_.initialize(shard_values_.view(), ex);
    if (!gather_) return;
    // ZeRO-3: the shard is the parameters now; each bucket's values live in its value slab.
    wait_for(ex);
    group_->release_values();
    for (std::size_t k = 0; k != plan_.buckets.size(); ++k) lend_values(k);
  }
  /// ZeRO-1: this rank's shard of the parameters from the group's values (after
  /// a checkpoint overwrote them), leaving the optimizer's state as it is.
  /// (In place, the parameters are the shard: nothing to take. ZeRO-3 after
  /// initialize: the shard is all there is, and a checkpoint loads into it.)
  template <class Executor>
  void take_parameter_shard(const Executor& ex) {
    if (zero_ && !in_place_ && !group_->values_lent()) copy_shard(shard_values_.view(), ex);
  }
  /// Where this rank's parameters lie, for a checkpoint: the network's buffer,
  /// or under ZeRO-3 (once initialized) this rank's shard, laid out as the optimizer's state.
  std::pair<optim::flat_view<Element, Space>, optim::state_layout> parameter_values() const {
    if (group_->values_lent()) return {shard_values_.view(), state_layout()};
    return {group_->values(), optim::state_layout::whole(group_->size())};
  }

  /// Where the optimizer holds the group's elements: all of them, or under
  /// ZeRO-1 this rank's chunk of each bucket (padding left out), packed.
  optim::state_layout state_layout() const {
    if (!zero_) return optim::state_layout::whole(group_->size());
    optim::state_layout layout{{}, true};
    for (const gradient_bucket& b : plan_.buckets) {
      const index_t chunk = b.padded_size / ranks_;
      const index_t first = std::min(b.end, b.begin + rank_ * chunk), last = std::min(b.end, first + chunk);
      if (last > first) layout.spans.push_back({first, last, b.padded_begin / ranks_});
    }
    return layout;
  }
  /// The network's parameter group this part belongs to.
  const nn::parameter_group<Element, Space>& group() const { return *group_; }

  /// After a micro-batch's backward, except the last: its gradients into the fp32 sum, one pass over the group.
  template <class Executor>
  void accumulate(bool first, const Executor& ex) {
    const auto sum = accumulation_.view();
    if (first) assign(sum, group_->gradients(), ex);
    else assign(sum, sum + group_->gradients(), ex);
  }

  /// ZeRO-2: whether the gradients live in slabs, bucket by bucket.
  bool lends_gradients() const { return lend_; }
  /// ZeRO-3: whether the parameters are gathered bucket by bucket.
  bool gathers_values() const { return gather_; }
  /// ZeRO-3: bucket k's parameters from every rank's shard into value slab k % 2
  /// (padding included), once the layers that read that slab before are done.
  template <class Communicator>
  auto gather_values(std::size_t k, Communicator& communicator) {
    const gradient_bucket& b = plan_.buckets[k];
    return communicator.all_gather(
        detail::part(shard_values_.view(), b.padded_begin / ranks_, (b.padded_begin + b.padded_size) / ranks_),
        detail::part(value_slabs_[k % 2].view(), 0, b.padded_size));
  }
  /// ZeRO-3: bucket k's parameters from every rank's shard into `staging`
  /// (padded_size elements, the communication layout), for a whole copy.
  template <class Communicator>
  auto gather_whole(std::size_t k, const optim::flat_view<Element, Space>& staging, Communicator& communicator) {
    const gradient_bucket& b = plan_.buckets[k];
    return communicator.all_gather(
        detail::part(shard_values_.view(), b.padded_begin / ranks_, (b.padded_begin + b.padded_size) / ranks_),
        detail::part(staging, b.padded_begin, b.padded_begin + b.padded_size));
  }
  /// ZeRO-3, after gather_whole: every bucket from `staging` into `values` (a whole network's buffer of this group).
  template <class Executor>
  void unpack_whole(const optim::flat_view<Element, Space>& staging, const optim::flat_view<Element, Space>& values,
                    const Executor& ex) const {
    for (const gradient_bucket& b : plan_.buckets)
      copy_in_order(detail::part(values, b.begin, b.end), detail::part(staging, b.padded_begin, b.padded_begin + b.size()), ex);
  }
  /// ZeRO-3: bucket k's parameters are in value slab k % 2 (then rebind its layers).
  void lend_values(std::size_t k) {
    const gradient_bucket& b = plan_.buckets[k];
    group_->lend_values(b.begin, b.end, value_slabs_[k % 2].view());
  }
  /// ZeRO-2: bucket k's gradients into slab k % 2, its gaps (padding that
  /// backward does not write) zeroed. Call once the collective that read the
  /// slab before is done, and before backward reaches the bucket's layers (then
  /// rebind them: network::rebind_layers).
  template <class Executor>
  void lend_bucket(std::size_t k, const Executor& ex) {
    const gradient_bucket& b = plan_.buckets[k];
    const auto slab = slabs_[k % 2].view();
    group_->lend_gradients(b.begin, b.end, slab);
    for (const auto& [begin, end] : gaps_[k]) assign(detail::part(slab, begin, end), detail::part(zeros_.view(), 0, end - begin), ex);
  }
  /// ZeRO-2 with micro-batches, once a micro-batch's reduce_scatters are done:
  /// before the last, this rank's shard into the fp32 sum; at the last, the sum
  /// into the shard the optimizer reads.
  template <class Executor>
  void accumulate_shard(bool first, bool last, const Executor& ex) {
    visit([&](auto& c) {
      const auto shard = c.shard.view();
      const auto sum = shard_sum_.view();
      if (last) assign(shard, sum + shard, ex);
      else if (first) assign(sum, shard, ex);
      else assign(sum, sum + shard, ex);
    });
  }

  /// Bucket k's gradients into the communication buffer: one pass, or none.
  template <class Executor>
  void prepare(std::size_t k, const Executor& ex) {
    const gradient_bucket& b = plan_.buckets[k];
    if (lend_) {  // ZeRO-2: the slab is the buffer, or its bf16 copy is (padding included: it is zero)
      if constexpr (!std::is_same_v<Element, bfloat16>)
        if (narrow_)
          assign(detail::part(narrow_buffers_.slabs[k % 2].view(), 0, b.padded_size),
                 detail::part(slabs_[k % 2].view(), 0, b.padded_size), ex);
      return;
    }
    const auto g = detail::part(group_->gradients(), b.begin, b.end);
    visit([&](auto& c) {
      const auto destination = detail::part(c.buffer, b.padded_begin, b.padded_begin + b.size());
      if (accumulating_) assign(destination, detail::part(accumulation_.view(), b.begin, b.end) + g, ex);
      else if (static_cast<const void*>(destination.data()) != static_cast<const void*>(g.data()))
        assign(destination, g, ex);
    });
  }

  /// Bucket k's collective: the sum over ranks, in place (or ZeRO-1: this rank's chunk of it).
  template <class Communicator>
  auto reduce(std::size_t k, Communicator& communicator) {
    const gradient_bucket& b = plan_.buckets[k];
    return visit([&](auto& c) {
      const auto whole = bucket_input(c, k);
      if (zero_) {
        const auto mine = detail::part(c.shard.view(), b.padded_begin / ranks_, (b.padded_begin + b.padded_size) / ranks_);
        return communicator.reduce_scatter(whole, mine, comm::reduction_op::sum);
      }
      return communicator.all_reduce(whole, comm::reduction_op::sum);
    });
  }

  /// PowerSGD, instead of the buckets' collectives: the group's gradients (and
  /// the sum of earlier micro-batches) become their compressed sum over ranks.
  template <class Communicator, class Executor>
  void compress_and_reduce(Communicator& communicator, stream_order& order, const Executor& ex) {
    const auto g = group_->gradients();
    if (accumulating_) {
      const auto sum = accumulation_.view();
      assign(sum, sum + g, ex);
      compressor_->reduce(sum, g, communicator, order, ex);
    } else {
      compressor_->reduce(g, g, communicator, order, ex);
    }
    compressed_step_ = true;
  }
  /// Whether the group's gradients go through PowerSGD (communication = powersgd).
  bool compresses() const { return compressor_.has_value(); }
  /// fn(slot, E, Q) for each matrix PowerSGD compresses (parallel/powersgd.hpp); none without it.
  template <class Fn>
  void for_each_compression_state(Fn&& fn) {
    if (compressor_)
      compressor_->for_each_matrix_state([&](std::size_t slot, const auto& e, const auto& q) { fn(group_->slots()[slot], e, q); });
  }

  /// The reduced gradients' sum of squares into the controller (this rank's
  /// shard under ZeRO-1). `skipped`: group ranges left out (under ZeRO-1 with
  /// a split network, the replicated gradients on all but one tensor rank).
  template <class Controller, class Executor>
  void add_gradient_norm(Controller& controller, const Executor& ex,
                         const std::vector<std::pair<index_t, index_t>>& skipped = {}) {
    if (compressed_step_) return controller.accumulate_gradient_norm(group_->gradients(), ex);
    visit([&](auto& c) {
      if (skipped.empty()) return controller.accumulate_gradient_norm(reduced(c), ex);
      const auto shard = reduced(c);
      for (const optim::state_span& s : state_layout().spans) {  // s.begin.. of the group lie at s.at.. of the shard
        index_t from = s.begin;
        const auto add = [&](index_t to) {
          if (to > from) controller.accumulate_gradient_norm(detail::part(shard, s.at + from - s.begin, s.at + to - s.begin), ex);
        };
        for (const auto& [begin, end] : skipped) {
          if (end <= from || begin >= s.end) continue;
          add(std::min(begin, s.end));
          from = std::max(from, std::min(end, s.end));
        }
        add(s.end);
      }
    });
  }

  /// The optimizer's step on the reduced gradients: every parameter, or under ZeRO this rank's shard of them.
  template <class Executor>
  void update(const optim::step_scalars<Space>& scalars, const Executor& ex) {
    if (compressed_step_) {
      compressed_step_ = false;
      return optimizer_.step(group_->values(), group_->gradients(), scalars, ex);
    }
    visit([&](auto& c) {
      if (in_place_) {  // this rank's chunk of each bucket, where it lies among the parameters
        const auto values = group_->values();
        const auto gradients = reduced(c);
        optimizer_.begin_step(scalars, ex);
        for (const optim::state_span& s : state_layout().spans)
          optimizer_.step_part(s.at, detail::part(values, s.begin, s.end),
                               detail::part(gradients, s.at, s.at + s.end - s.begin), scalars, ex);
      } else if (zero_) {
        optimizer_.step(shard_values_.view(), reduced(c), scalars, ex);
      } else {
        optimizer_.step(group_->values(), reduced(c), scalars, ex);
      }
    });
  }

  /// ZeRO-1: every rank's updated chunk of bucket k into every rank's parameters.
  template <class Communicator>
  auto gather(std::size_t k, Communicator& communicator) {
    const gradient_bucket& b = plan_.buckets[k];
    if (in_place_) return communicator.all_gather(detail::part(group_->values(), b.begin, b.end));
    const auto mine = detail::part(shard_values_.view(), b.padded_begin / ranks_, (b.padded_begin + b.padded_size) / ranks_);
    if (plan_.padded())
      return communicator.all_gather(mine, detail::part(staging_.view(), b.padded_begin, b.padded_begin + b.padded_size));
    return communicator.all_gather(mine, detail::part(group_->values(), b.begin, b.end));
  }
  /// After the gathers: padded buckets from the staging buffer into the parameters, one pass.
  template <class Executor>
  void finish_gather(const Executor& ex) {
    if (!plan_.padded()) return;
    for (const gradient_bucket& b : plan_.buckets)
      assign(detail::part(group_->values(), b.begin, b.end),
             detail::part(staging_.view(), b.padded_begin, b.padded_begin + b.size()), ex);
  }

  /// Adds the bytes this group holds on this rank to `report`.
  void add_memory(memory_report& report) const {
    const index_t bytes = group_->size() * index_t(sizeof(Element));
    report.parameters += gather_ ? detail::bytes_of(shard_values_) + detail::bytes_of(value_slabs_[0]) +
                                       detail::bytes_of(value_slabs_[1])
                                 : bytes;
    report.optimizer_state += optimizer_state_bytes();
    if (gather_) report.slabs += detail::bytes_of(value_slabs_[0]) + detail::bytes_of(value_slabs_[1]);
    if (lend_) report.slabs += detail::bytes_of(slabs_[0]) + detail::bytes_of(slabs_[1]);
    if (lend_) {  // ZeRO-2: the slabs and this rank's shard of the sum are the gradients
      report.gradients += detail::bytes_of(slabs_[0]) + detail::bytes_of(slabs_[1]) + detail::bytes_of(shard_sum_) +
                          detail::bytes_of(native_buffers_.shard) + detail::bytes_of(narrow_buffers_.shard);
      report.communication += detail::bytes_of(narrow_buffers_.slabs[0]) + detail::bytes_of(narrow_buffers_.slabs[1]) +
                              (gather_ ? 0 : detail::bytes_of(shard_values_)) + detail::bytes_of(staging_);
      return;
    }
    report.gradients += bytes + detail::bytes_of(accumulation_);
    for (index_t b : {detail::bytes_of(native_buffers_.owned), detail::bytes_of(native_buffers_.shard),
                      detail::bytes_of(narrow_buffers_.owned), detail::bytes_of(narrow_buffers_.shard),
                      detail::bytes_of(shard_values_), detail::bytes_of(staging_)})
      report.communication += b;
    if (compressor_) report.communication += compressor_->bytes_held();
  }
  /// Bytes this group hands to collectives in a step: every bucket's buffer
  /// (all_reduce, or reduce_scatter's input) and, under ZeRO-1, its shard of the
  /// parameters (all_gather's input); under PowerSGD, a compressed step's factors and vectors.
  /// ZeRO-2/3 communicate every micro-batch: the buckets' reduce_scatters and,
  /// under ZeRO-3, all_gather's shard of every bucket in forward and of all but
  /// the first two again in backward.
  index_t bytes_per_step(index_t micro_batches) const {
    if (compressor_) return compressor_->bytes_per_step();
    index_t bytes = 0;
    for (std::size_t k = 0; k != plan_.buckets.size(); ++k) bytes += communicated_bytes(k);
    if (lend_) bytes *= micro_batches;
    const index_t e = sizeof(Element);
    if (gather_) {
      index_t gathered = plan_.shard_size();
      for (std::size_t k = 2; k < plan_.buckets.size(); ++k) gathered += plan_.buckets[k].padded_size / ranks_;
      bytes += gathered * e * micro_batches;
    } else if (zero_) {
      bytes += plan_.shard_size() * e;
    }
    return bytes;
  }

 private:
  static constexpr bool steps_in_parts = requires(optimizer_type& o, const optim::flat_view<Element, Space>& v,
                                                  const optim::step_scalars<Space>& s, const host_executor& ex) {
    o.begin_step(s, ex);
    o.step_part(index_t{0}, v, v, s, ex);
  };
  // This rank's chunk of each bucket of the parameters, packed (the optimizer's layout).
  template <class Executor>
  void copy_shard(const optim::flat_view<Element, Space>& shard, const Executor& ex) const {
    const auto values = group_->values();
    for (const optim::state_span& s : state_layout().spans)
      copy_in_order(detail::part(shard, s.at, s.at + s.end - s.begin), detail::part(values, s.begin, s.end), ex);
  }
  index_t optimizer_state_bytes() const {
    index_t bytes = 0;
    optimizer_.for_each_state([&](const auto&, const auto& v) {
      bytes += v.size() * index_t(sizeof(typename std::remove_cvref_t<decltype(v)>::element_type));
    });
    return bytes;
  }
  // ZeRO-2: two slabs, each of the largest bucket it takes (even and odd
  // buckets), the gaps of each bucket backward leaves unwritten, and no
  // gradient buffer in the group any more. (With two buckets or fewer the
  // slabs hold every gradient: sharding them saves memory with many buckets.)
  void lend_slabs(nn::parameter_group<Element, Space>& group, stream_t stream) {
    index_t largest[2] = {0, 0}, longest_gap = 0;
    gaps_.resize(plan_.buckets.size());
    for (std::size_t k = 0; k != plan_.buckets.size(); ++k) {
      const gradient_bucket& b = plan_.buckets[k];
      largest[k % 2] = std::max(largest[k % 2], b.padded_size);
      index_t written = b.begin;  // gaps between the slots (alignment) and the padding after the bucket
      for (const nn::parameter_slot& slot : group.slots()) {
        if (slot.offset < b.begin || slot.offset >= b.end) continue;
        if (slot.offset > written) gaps_[k].emplace_back(written - b.begin, slot.offset - b.begin);
        written = slot.offset + slot.size;
      }
      if (b.begin + b.padded_size > written) gaps_[k].emplace_back(written - b.begin, b.padded_size);
      for (const auto& [begin, end] : gaps_[k]) longest_gap = std::max(longest_gap, end - begin);
    }
    for (std::size_t i = 0; i != 2; ++i) slabs_[i] = optim::detail::zero_tensor<Element, Space>(largest[i], stream);
    zeros_ = optim::detail::zero_tensor<Element, Space>(longest_gap, stream);
    if (accumulating_) shard_sum_ = optim::detail::zero_tensor<accumulation_type, Space>(plan_.shard_size(), stream);
    group.release_gradients();
    for (std::size_t k = 0; k != plan_.buckets.size(); ++k)  // every layer has a place to bind to from now on
      group.lend_gradients(plan_.buckets[k].begin, plan_.buckets[k].end, slabs_[k % 2].view());
  }
  template <class C>
  void make(communicated<C>& c, stream_t stream) {
    if (lend_) {
      if constexpr (!std::is_same_v<C, Element>)
        for (std::size_t i = 0; i != 2; ++i) c.slabs[i] = optim::detail::zero_tensor<C, Space>(slabs_[i].size(), stream);
      c.shard = optim::detail::zero_tensor<C, Space>(plan_.shard_size(), stream);
      return;
    }
    if constexpr (std::is_same_v<C, Element>) {
      if (!plan_.padded()) c.buffer = group_->gradients();  // communicated in place
    }
    if (c.buffer.data() == nullptr) {
      c.owned = optim::detail::zero_tensor<C, Space>(plan_.padded_size, stream);  // padding stays zero
      c.buffer = c.owned.view();
    }
    if (zero_) c.shard = optim::detail::zero_tensor<C, Space>(plan_.shard_size(), stream);
  }
  // fn(communicated<C>&) with the C chosen at construction.
  template <class Fn>
  decltype(auto) visit(Fn&& fn) {
    if constexpr (!std::is_same_v<Element, bfloat16>)
      if (narrow_) return fn(narrow_buffers_);
    return fn(native_buffers_);
  }
  // What bucket k's collective reads: its part of the communication layout, or its slab (ZeRO-2).
  template <class C>
  optim::flat_view<C, Space> bucket_input(communicated<C>& c, std::size_t k) const {
    const gradient_bucket& b = plan_.buckets[k];
    if (!lend_) return detail::part(c.buffer, b.padded_begin, b.padded_begin + b.padded_size);
    if constexpr (std::is_same_v<C, Element>) return detail::part(slabs_[k % 2].view(), 0, b.padded_size);
    else return detail::part(c.slabs[k % 2].view(), 0, b.padded_size);
  }
  template <class C>
  optim::flat_view<C, Space> reduced(communicated<C>& c) const {
    return zero_ ? c.shard.view() : detail::part(c.buffer, 0, plan_.size);
  }

  nn::parameter_group<Element, Space>* group_;
  int ranks_, rank_;
  bool narrow_, zero_, lend_, gather_, accumulating_;
  bucket_plan plan_;
  optimizer_type optimizer_;
  bool in_place_;  // ZeRO: the optimizer updates this rank's chunks inside the parameters, all_gather in place
  optim::flat_tensor<accumulation_type, Space> accumulation_;
  communicated<Element> native_buffers_;
  communicated<bfloat16> narrow_buffers_;
  optim::flat_tensor<Element, Space> shard_values_, staging_;
  std::array<optim::flat_tensor<Element, Space>, 2> slabs_;     // ZeRO-2: bucket k's gradients in slab k % 2
  std::array<optim::flat_tensor<Element, Space>, 2> value_slabs_;  // ZeRO-3: bucket k's parameters in slab k % 2
  std::vector<std::vector<std::pair<index_t, index_t>>> gaps_;  // ZeRO-2: per bucket, what backward leaves unwritten
  optim::flat_tensor<Element, Space> zeros_;                    // ZeRO-2: as many zeros as the longest gap
  optim::flat_tensor<accumulation_type, Space> shard_sum_;      // ZeRO-2 with micro-batches: the fp32 sum of shards
  std::optional<powersgd<Element, Space>> compressor_;
  bool compressed_step_ = false;  // this step's gradients were reduced by the compressor
};

}  // namespace fusor::parallel
