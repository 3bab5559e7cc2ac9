// fusor/parallel/tensor_parallel.hpp — tensor parallelism over any communicator:
// connects every split layer of a network (nn::column_parallel / nn::row_parallel,
// nn/sharding.hpp) to the ranks that hold the other slices.
//
//   template <int Ways>
//   using mlp = nn::sequential<nn::features<784>,
//       nn::linear<784, 512, nn::relu, nn::parallel<nn::column_parallel<Ways>>>,  // this rank's 512/Ways
//       nn::linear<512, 10, nn::identity, nn::parallel<nn::row_parallel<Ways>>>>;  // summed: all 10
//   nn::network<mlp<2>, fs::fp32> net(128, {.seed = 1});
//   fs::parallel::tensor_parallel tp(net, communicator);   // checks sizes, connects, draws this rank's slices
//   optim::trainer<...> train(net, ...);                    // then train as on one rank, the same batch everywhere
//   train.reduce_gradient_norm_with(tp);                    // clipping and the Inf/NaN skip by the global norm
//
// Every rank runs the whole network on the same batch; a split layer holds and
// computes its slice, and a column -> row block communicates once in forward
// (the row layer's sum) and once in backward (the column layer's input
// gradient, where one is wanted). The communicator is any comm::communicator of
// the network's memory: comm::single and comm::mpi (host), comm::nccl (device:
// its all-reduces are queued on its stream, ordered against the executor's by
// events where the two differ, and the host never waits).
//
// Constructing it re-draws the parameters from the network's seed, so that
// each rank holds its slices of the unsplit network's values: make it before
// loading a checkpoint or initialising an optimizer. Declare it after the
// network and keep it while the network runs; destroyed, it disconnects the
// layers (a forward then throws).
//
// It is also the trainer's gradient_norm_reduction (optim/gradient_norm_reduction.hpp):
// each rank's squared norm becomes its share (tensor_parallel_norm.hpp: the
// split gradients' squares and 1/n of the replicated ones') and one all-reduce
// of 8 bytes sums the shares, so every rank clips and skips alike and the
// replicated parameters stay equal. A trainer with clipping or fp16 loss
// scaling refuses to step a split network without it. With data and pipeline
// parallelism it combines over a mesh (parallel/mesh.hpp): split the network
// (or each pipeline context) over the mesh's tensor group, then train it
// data-parallel or as a pipeline over the other groups.
//
// dispatch_tensor_parallel<1, 2, 4, 8>(comm.size(), {512}, [&]<int Ways>() { ... })
// runs the body compiled for the communicator's size, for programs built for
// several degrees; a size not built in, or not dividing a split width, is an error at start.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "fusor/comm/communicator.hpp"
#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/nn/sharding.hpp"
#include "fusor/optim/gradient_norm_reduction.hpp"
#include "fusor/parallel/stream_order.hpp"
#include "fusor/parallel/tensor_parallel_norm.hpp"

namespace fusor::parallel {

/// nn::shard_group over a communicator: the sum split layers ask for.
///
/// A communicator with a stream of its own (comm::nccl) queues the all-reduce
/// there. When that is the compute stream, stream order alone puts it after the
/// matmul that wrote the partial sums and before their next reader. When it is
/// another stream, events say so (stream_order): the communicator's stream
/// waits for what the compute stream has queued, and the compute stream for the
/// all-reduce, without the host waiting. That holds for any two streams: the
/// legacy default stream 0, which a non-blocking stream does not wait for, and
/// per-thread default streams included. Any other communicator of device memory
/// reads it from the host: the compute stream is synchronized first.
template <class Communicator, class Space>
class communicator_shard_group final : public nn::shard_group<Space> {
 public:
  /// Sums over the ranks of `c`, which must outlive the group.
  explicit communicator_shard_group(Communicator& c) : communicator_(c) {}
  int rank() const override { return communicator_.rank(); }
  int size() const override { return communicator_.size(); }
  void all_reduce_sum(nn::flat_view<float, Space> data, stream_t stream) override { sum(data, stream); }
  void all_reduce_sum(nn::flat_view<double, Space> data, stream_t stream) override { sum(data, stream); }
  void all_reduce_sum(nn::flat_view<bfloat16, Space> data, stream_t stream) override { sum(data, stream); }
  void all_reduce_sum(nn::flat_view<float16, Space> data, stream_t stream) override { sum(data, stream); }
  /// The communicator it sums over.
  Communicator& communicator() const { return communicator_; }

 private:
  template <class Element>
  void sum(const nn::flat_view<Element, Space>& data, [[maybe_unused]] stream_t stream) {
#if FUSOR_HAS_CUDA
    if constexpr (stream_ordered<Communicator>) {
      const cuda_executor compute{stream};
      const bool same_stream = communicator_.stream() == stream;
      if (!same_stream) order_.communication_after_compute(communicator_, compute);
      (void)communicator_.all_reduce(data, comm::reduction_op::sum);
      if (!same_stream) order_.compute_after_communication(communicator_, compute);
      return;
    } else if constexpr (!std::is_same_v<Space, host_space>) {
      FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream));  // the data must be written before the host sends it
    }
#endif
    communicator_.all_reduce(data, comm::reduction_op::sum).wait();
  }
  Communicator& communicator_;
  stream_order order_;
};

namespace detail {
template <class Layer, class Space>
concept split_layer = requires(Layer& layer, nn::shard_group<Space>& group) {
  layer.connect(group);
  layer.disconnect();
  { Layer::shard_ways } -> std::convertible_to<int>;
};
}  // namespace detail

/// Tensor parallelism over a communicator: connects every split layer of a network to the ranks that hold
/// the other slices, and makes the trainer's gradient norm global (optim::gradient_norm_reduction).
template <class Network, class Communicator>
class tensor_parallel final : public optim::gradient_norm_reduction<typename Network::space> {
 public:
  using space = typename Network::space;  ///< the network's memory space
  static_assert(comm::communicator<Communicator, space>,
                "fusor: parallel::tensor_parallel needs a communicator of the network's memory: comm::nccl for "
                "device memory, comm::mpi or comm::single for host memory");

  /// Connects `network`'s split layers to `communicator` and re-draws the parameters from the network's seed,
  /// so that this rank holds its slices of the unsplit values. Both must outlive it. Throws fusor::error, with
  /// nothing connected, where a layer is split other than communicator.size() ways.
  tensor_parallel(Network& network, Communicator& communicator)
      : network_(network), group_(communicator), norm_(network) {
    // Every size first, so a mismatch leaves nothing half connected.
    std::size_t position = 0;
    network_.for_each_layer([&](auto& layer) {
      using layer_t = std::remove_cvref_t<decltype(layer)>;
      if constexpr (detail::split_layer<layer_t, space>) {
        if (layer_t::shard_ways != communicator.size())
          throw error("fusor::parallel::tensor_parallel: mismatched communicator sizes: layer " +
                      std::to_string(position) + ", " + layer_t::name() + ", is split " +
                      std::to_string(layer_t::shard_ways) + " ways but the communicator has " +
                      std::to_string(communicator.size()) + " ranks");
        ++split_layers_;
      }
      ++position;
    });
    for_each_split_layer([&](auto& layer) { layer.connect(group_); });
    network_.initialize(network_.seed());  // this rank's slices of the unsplit values
  }
  tensor_parallel(const tensor_parallel&) = delete;
  tensor_parallel& operator=(const tensor_parallel&) = delete;
  ~tensor_parallel() {
    for_each_split_layer([](auto& layer) { layer.disconnect(); });
  }

  /// This rank's index in the communicator.
  int rank() const { return group_.rank(); }
  /// The communicator's ranks: the ways each split layer is split.
  int size() const { return group_.size(); }
  /// How many of the network's layers are split across the ranks.
  std::size_t split_layers() const { return split_layers_; }
  /// The shard group the split layers are connected to.
  nn::shard_group<space>& group() { return group_; }
  /// Which gradients are replicated and which split (for the norm).
  const tensor_parallel_norm<space>& norm() const { return norm_; }

  /// optim::gradient_norm_reduction: this rank's squared norm becomes the
  /// global one, on every rank (trainer.reduce_gradient_norm_with(tp) calls it).
  void reduce(optim::scalar_view<double, space> norm_squared, stream_t stream) override {
    if (size() == 1) return;  // one rank holds every gradient
    if constexpr (space::host_accessible) {
      norm_.share(network_, norm_squared.data(), size(), host_executor{});
    } else {
#if FUSOR_HAS_CUDA
      norm_.share(network_, norm_squared.data(), size(), cuda_executor{stream});
#else
      throw error("fusor::parallel::tensor_parallel: a norm of device gradients in a unit not compiled by nvcc");
#endif
    }
    group_.all_reduce_sum(nn::flat_view<double, space>(norm_squared.data(), 1), stream);
  }
  /// The replicated gradients' ranges, and whether this rank counts them (optim::gradient_norm_reduction's).
  using replicated_gradients = typename optim::gradient_norm_reduction<space>::replicated_gradients;
  /// For ZeRO-1 over a data group (data_parallel): the replicated ranges, counted by tensor rank 0.
  const replicated_gradients* replicated() const override {
    if (!replicated_) replicated_ = replicated_gradients{norm_.replicated_ranges(), rank() == 0};
    return &*replicated_;
  }
  void sum_shares(optim::scalar_view<double, space> norm_squared, stream_t stream) override {
    if (size() > 1) group_.all_reduce_sum(nn::flat_view<double, space>(norm_squared.data(), 1), stream);
  }

 private:
  template <class Fn>
  void for_each_split_layer(Fn&& fn) {
    network_.for_each_layer([&](auto& layer) {
      if constexpr (detail::split_layer<std::remove_cvref_t<decltype(layer)>, space>) fn(layer);
    });
  }

  Network& network_;
  communicator_shard_group<Communicator, space> group_;
  std::size_t split_layers_ = 0;
  tensor_parallel_norm<space> norm_;
  mutable std::optional<replicated_gradients> replicated_;
};

namespace detail {
template <int... Degrees>
std::string degree_list() {
  std::string list;
  ((list += (list.empty() ? "" : ", ") + std::to_string(Degrees)), ...);
  return list;
}
}  // namespace detail

/// `fn.template operator()<Ways>()` for Ways == ranks, one of the Degrees the
/// program is built for; returns what it returns. Throws fusor::error, before
/// calling anything, when ranks is not one of them or does not divide one of
/// `split_widths` (the widths the program's split layers divide).
template <int... Degrees, class Fn>
auto dispatch_tensor_parallel(int ranks, std::initializer_list<std::size_t> split_widths, Fn&& fn) {
  static_assert(sizeof...(Degrees) >= 1, "fusor: dispatch_tensor_parallel<Degrees...> needs at least one degree");
  for (std::size_t width : split_widths)
    if (ranks < 1 || width % static_cast<std::size_t>(ranks) != 0)
      throw error("fusor::parallel::dispatch_tensor_parallel: " + std::to_string(ranks) +
                  " ranks cannot split a layer of width " + std::to_string(width) +
                  " (the tensor-parallel degree must divide every split width)");
  if (((ranks != Degrees) && ...))
    throw error("fusor::parallel::dispatch_tensor_parallel: " + std::to_string(ranks) +
                " ranks, but this program is built for tensor-parallel degrees " + detail::degree_list<Degrees...>() +
                " (launch with one of them)");
  constexpr int first = [] {
    constexpr int all[] = {Degrees...};
    return all[0];
  }();
  using result = decltype(fn.template operator()<first>());
  if constexpr (std::is_void_v<result>) {
    (void)((ranks == Degrees ? (fn.template operator()<Degrees>(), true) : false) || ...);
  } else {
    std::optional<result> value;
    (void)((ranks == Degrees ? (value.emplace(fn.template operator()<Degrees>()), true) : false) || ...);
    return std::move(*value);
  }
}
/// The same without split widths to check.
template <int... Degrees, class Fn>
auto dispatch_tensor_parallel(int ranks, Fn&& fn) {
  return dispatch_tensor_parallel<Degrees...>(ranks, {}, std::forward<Fn>(fn));
}

}  // namespace fusor::parallel
