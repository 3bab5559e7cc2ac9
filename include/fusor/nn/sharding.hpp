// fusor/nn/sharding.hpp — tensor parallelism as nn sees it: the policies that
// split a layer's width across ranks (Megatron's column- and row-parallel
// linear layers), and the small interface through which a split layer sums its
// partial results over its group of ranks.
//
//   nn::linear<784, 512, nn::relu, nn::parallel<nn::column_parallel<2>>>  // w: [256, 784]; out: features<256>
//   nn::linear<512, 10, nn::identity, nn::parallel<nn::row_parallel<2>>>  // w: [10, 256];  in:  features<256>
//
// The degree is a compile-time constant because activations have static
// extents. nn does not depend on comm: shard_group is abstract here, and
// fusor/parallel/tensor_parallel.hpp implements it over any communicator and
// connects every split layer of a network to it.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "fusor/core/error.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/stream_binding.hpp"
#include "fusor/nn/parameters.hpp"

namespace fusor::nn {

// The layer's output features are split `Ways` ways: each rank computes its own
// slice of them from the whole input (no communication in forward).
template <int Ways>
struct column_parallel {
  static_assert(Ways >= 1, "fusor: nn::column_parallel<Ways> needs Ways >= 1");
  static constexpr int ways = Ways;
};
// The layer's input features are split `Ways` ways: each rank multiplies its
// slice and the partial outputs are summed over the ranks (one all-reduce).
template <int Ways>
struct row_parallel {
  static_assert(Ways >= 1, "fusor: nn::row_parallel<Ways> needs Ways >= 1");
  static constexpr int ways = Ways;
};

template <class S>
inline constexpr bool is_column_parallel_v = false;
template <int W>
inline constexpr bool is_column_parallel_v<column_parallel<W>> = true;
template <class S>
inline constexpr bool is_row_parallel_v = false;
template <int W>
inline constexpr bool is_row_parallel_v<row_parallel<W>> = true;
template <class S>
inline constexpr bool is_tensor_parallel_v = is_column_parallel_v<S> || is_row_parallel_v<S>;

// How many ways a parallel strategy splits a layer (1: not split).
template <class S>
inline constexpr int parallel_ways_v = 1;
template <int W>
inline constexpr int parallel_ways_v<column_parallel<W>> = W;
template <int W>
inline constexpr int parallel_ways_v<row_parallel<W>> = W;

// The ranks that hold the slices of split layers. all_reduce_sum replaces
// `data` on every rank by its sum over the ranks. It is ordered after the work
// queued on `stream` before it and before the work queued there after it: on
// the host it has finished when it returns; over NCCL it may be queued on the
// stream itself. Implemented by parallel::tensor_parallel.
template <class Space>
class shard_group {
 public:
  virtual ~shard_group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(flat_view<float, Space> data, stream_t stream) = 0;
  virtual void all_reduce_sum(flat_view<double, Space> data, stream_t stream) = 0;
  virtual void all_reduce_sum(flat_view<bfloat16, Space> data, stream_t stream) = 0;
  virtual void all_reduce_sum(flat_view<float16, Space> data, stream_t stream) = 0;
};

using ::fusor::executor_stream;  // core/stream_binding.hpp

// What a split layer holds: the group it is connected to, if any. `layer`
// names the layer in errors ("nn::linear<784, 512> (column_parallel<2>)").
template <class Space>
class shard_connection {
 public:
  void connect(shard_group<Space>& group, int ways, const std::string& layer) {
    if (group.size() != ways)
      throw error("fusor: mismatched communicator sizes: " + layer + " is split " + std::to_string(ways) +
                  " ways but its group has " + std::to_string(group.size()) + " ranks");
    group_ = &group;
  }
  void disconnect() { group_ = nullptr; }
  bool connected() const { return group_ != nullptr; }
  // This rank's slice: 0 before connect.
  int shard_index() const { return group_ != nullptr ? group_->rank() : 0; }
  void require_connected(const std::string& layer, const char* pass) const {
    if (group_ == nullptr)
      throw error("fusor: " + layer + ": " + pass +
                  " before the layer was connected to its tensor-parallel group (construct a "
                  "fusor::parallel::tensor_parallel over the network and a communicator first)");
  }
  // In place, over the group; `data` is any contiguous view.
  template <class View, class Executor>
  void all_reduce_sum(const View& data, const Executor& ex) const {
    using element = typename View::element_type;
    group_->all_reduce_sum(flat_view<element, Space>(data.data(), data.size()), executor_stream(ex));
  }

 private:
  shard_group<Space>* group_ = nullptr;
};

// Compile-time error for a degree that does not divide the width it splits;
// the failing instantiation names the layer's width and the degree.
template <std::size_t Width, int Ways, bool Divides>
struct tensor_parallel_degree_must_divide_width {
  static_assert(Divides,
                "fusor: a tensor-parallel degree must divide the width it splits; see "
                "tensor_parallel_degree_must_divide_width<width, degree, false>");
  static constexpr bool value = Divides;
};

}  // namespace fusor::nn
