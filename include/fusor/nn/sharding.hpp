// fusor/nn/sharding.hpp — tensor parallelism as nn sees it: the policies that
// split a layer's width across ranks (Megatron's column- and row-parallel
// linear layers), and the small interface through which a split layer sums its
// partial results over its group of ranks.
//
//   nn::linear<784, 512, nn::relu, nn::parallel<nn::column_parallel<2>>>  // w: [256, 784]; out: features<256>
//   nn::linear<512, 10, nn::identity, nn::parallel<nn::row_parallel<2>>>  // w: [10, 256];  in:  features<256>
//   nn::linear<C, 3 * C, nn::identity, nn::parallel<nn::column_parallel<2, 3>>>  // a GPT's qkv: w [3, C/2, C]
//
// The degree is a compile-time constant because activations have static
// extents. nn does not depend on comm: shard_group is abstract here, and
// fusor/parallel/tensor_parallel.hpp implements it over any communicator and
// connects every split layer of a network to it.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/stream_binding.hpp"
#include "fusor/nn/parameters.hpp"

namespace fusor::nn {

/// The layer's output features are split `Ways` ways: each rank computes its own
/// slice of them from the whole input (no communication in forward).
///
/// With Parts > 1 the output is Parts equal parts side by side, each split
/// `Ways` ways, and rank r holds slice r of every part, in order: a GPT's qkv
/// projection nn::linear<C, 3 * C> is column_parallel<W, 3>, so that rank r
/// computes [its q heads | its k heads | its v heads], the input of
/// nn::causal_attention<H / W, D> (Megatron's split of attention by heads). A
/// contiguous split (Parts = 1) would give rank 0 the queries of several heads
/// and nothing else. The output width must be a multiple of Parts * Ways.
template <int Ways, int Parts = 1>
struct column_parallel {
  static_assert(Ways >= 1, "fusor: nn::column_parallel<Ways, Parts> needs Ways >= 1");
  static_assert(Parts >= 1, "fusor: nn::column_parallel<Ways, Parts> needs Parts >= 1");
  /// The number of ranks the output is split across
  static constexpr int ways = Ways;
  /// The number of equal, interleaved parts of the output
  static constexpr int parts = Parts;
};
/// The layer's input features are split `Ways` ways: each rank multiplies its
/// slice and the partial outputs are summed over the ranks (one all-reduce).
template <int Ways>
struct row_parallel {
  static_assert(Ways >= 1, "fusor: nn::row_parallel<Ways> needs Ways >= 1");
  /// The number of ranks the input is split across
  static constexpr int ways = Ways;
};

/// Whether the parallel strategy S is a column_parallel<...>.
template <class S>
inline constexpr bool is_column_parallel_v = false;
/// True for every column_parallel<W, P>.
template <int W, int P>
inline constexpr bool is_column_parallel_v<column_parallel<W, P>> = true;
/// Whether the parallel strategy S is a row_parallel<...>.
template <class S>
inline constexpr bool is_row_parallel_v = false;
/// True for every row_parallel<W>.
template <int W>
inline constexpr bool is_row_parallel_v<row_parallel<W>> = true;
/// Whether the parallel strategy S splits a layer across ranks (column- or row-parallel).
template <class S>
inline constexpr bool is_tensor_parallel_v = is_column_parallel_v<S> || is_row_parallel_v<S>;

/// How many ways a parallel strategy splits a layer (1: not split).
template <class S>
inline constexpr int parallel_ways_v = 1;
/// W for column_parallel<W, P>.
template <int W, int P>
inline constexpr int parallel_ways_v<column_parallel<W, P>> = W;
/// W for row_parallel<W>.
template <int W>
inline constexpr int parallel_ways_v<row_parallel<W>> = W;
/// Into how many interleaved parts a column-parallel strategy splits the output (1: one contiguous split).
template <class S>
inline constexpr int parallel_parts_v = 1;
/// P for column_parallel<W, P>.
template <int W, int P>
inline constexpr int parallel_parts_v<column_parallel<W, P>> = P;

/// The ranks that hold the slices of split layers. all_reduce_sum replaces
/// `data` on every rank by its sum over the ranks. It is ordered after the work
/// queued on `stream` before it and before the work queued there after it: on
/// the host it has finished when it returns; over NCCL it may be queued on the
/// stream itself. Implemented by parallel::tensor_parallel.
template <class Space>
class shard_group {
 public:
  virtual ~shard_group() = default;
  /// This rank's index in the group, 0 to size() - 1
  virtual int rank() const = 0;
  /// The number of ranks in the group
  virtual int size() const = 0;
  /// Replaces fp32 `data` on every rank by its sum over the ranks, in `stream`'s order.
  virtual void all_reduce_sum(flat_view<float, Space> data, stream_t stream) = 0;
  /// Replaces fp64 `data` on every rank by its sum over the ranks, in `stream`'s order.
  virtual void all_reduce_sum(flat_view<double, Space> data, stream_t stream) = 0;
  /// Replaces bf16 `data` on every rank by its sum over the ranks, in `stream`'s order.
  virtual void all_reduce_sum(flat_view<bfloat16, Space> data, stream_t stream) = 0;
  /// Replaces fp16 `data` on every rank by its sum over the ranks, in `stream`'s order.
  virtual void all_reduce_sum(flat_view<float16, Space> data, stream_t stream) = 0;
};

using ::fusor::executor_stream;  // core/stream_binding.hpp

/// What a split layer holds: the group it is connected to, if any. `layer`
/// names the layer in errors ("nn::linear<784, 512> (column_parallel<2>)").
template <class Space>
class shard_connection {
 public:
  /// Connects to `group` (not owned: it must outlive the connection); throws fusor::error when the group's size
  /// is not `ways`.
  void connect(shard_group<Space>& group, int ways, const std::string& layer) {
    if (group.size() != ways)
      throw error("fusor: mismatched communicator sizes: " + layer + " is split " + std::to_string(ways) +
                  " ways but its group has " + std::to_string(group.size()) + " ranks");
    group_ = &group;
  }
  /// Forgets the group.
  void disconnect() { group_ = nullptr; }
  /// Whether a group is connected.
  bool connected() const { return group_ != nullptr; }
  /// This rank's slice: 0 before connect.
  int shard_index() const { return group_ != nullptr ? group_->rank() : 0; }
  /// Throws fusor::error, naming `layer` and `pass` (e.g. "forward"), when no group is connected.
  void require_connected(const std::string& layer, const char* pass) const {
    if (group_ == nullptr)
      throw error("fusor: " + layer + ": " + pass +
                  " before the layer was connected to its tensor-parallel group (construct a "
                  "fusor::parallel::tensor_parallel over the network and a communicator first)");
  }
  /// Sums `data` over the group in place, in the executor's stream order; `data` is any contiguous view.
  /// The group must be connected.
  template <class View, class Executor>
  void all_reduce_sum(const View& data, const Executor& ex) const {
    using element = typename View::element_type;
    group_->all_reduce_sum(flat_view<element, Space>(data.data(), data.size()), executor_stream(ex));
  }

 private:
  shard_group<Space>* group_ = nullptr;
};

/// A split layer's input rule (nn/layer.hpp): the tensor-parallel degree divides the width it splits; named in the
/// compiler's message with the layer's width and the degree.
template <std::size_t Width, int Ways, bool Divides>
struct tensor_parallel_degree_must_divide_width {
  /// Whether the degree divides the width.
  static constexpr bool value = Divides;
  /// Fails to compile when it does not (nn::network's constructors and nn::sequential<> call it).
  static constexpr void check() {
    static_assert(Divides, "fusor: a tensor-parallel degree must divide the width it splits; choose a degree that "
                           "divides it; see tensor_parallel_degree_must_divide_width<width, degree, false>");
  }
};
/// The same for column_parallel<Ways, Parts>: the output width must be Parts
/// equal parts, each divisible by Ways; the message names all three.
template <std::size_t Width, int Parts, int Ways, bool Divides>
struct column_parallel_parts_times_ways_must_divide_width {
  /// Whether Parts * Ways divides the width.
  static constexpr bool value = Divides;
  /// Fails to compile when it does not (nn::network's constructors and nn::sequential<> call it).
  static constexpr void check() {
    static_assert(Divides,
                  "fusor: nn::column_parallel<Ways, Parts> splits each of Parts equal parts of the output Ways ways: "
                  "Parts * Ways must divide the output width; see "
                  "column_parallel_parts_times_ways_must_divide_width<width, parts, ways, false>");
  }
};

/// The shape of a parameter that column_parallel<Ways, Parts> splits along its
/// first axis (`whole`: the unsplit shape, [Out, ...]). With Parts > 1 on more
/// than one rank the slice is described as [Parts, Out / (Parts * Ways), ...],
/// split along axis 1: network::initialize then draws exactly the unsplit
/// tensor's rows of this rank (row p * Out / Parts + r * Out / (Parts * Ways) + i
/// at [p, i]), the rows lie in memory as the layer uses them (part after part)
/// and the norm counts the parameter as split. Otherwise [Out / Ways, ...] along axis 0.
/// (Such a bias is then rank 2: optim::trainer::prune, which prunes every
/// parameter of rank 2 or more, would count it as a weight. nn::sharding's
/// parts field says so: nn::place_parameter gives its place in the rank-1 whole.)
inline void shard_output_rows(parameter_spec& spec, std::vector<index_t> whole, int ways, int parts) {
  whole[0] /= ways;
  if (parts > 1 && ways > 1) {
    whole[0] /= parts;
    whole.insert(whole.begin(), index_t(parts));
    spec.shard = {1, ways, parts};
  } else {
    spec.shard = {0, ways};
  }
  spec.shape = std::move(whole);
}

}  // namespace fusor::nn
