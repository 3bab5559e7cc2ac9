// fusor/nn/embedding.hpp — a lookup table of learned vectors, as PyTorch's
// nn.Embedding(Vocabulary, Dimension): token ids in, one row of the table each out.
//
//   nn::sequential<nn::features<64>,                 // 64 int32 token ids per sample
//                  nn::embedding<1000, 32>,          // -> features<64, 32>
//                  nn::layernorm<32>, ...>
//
// The input is int32 (the layer's input_precision; a network whose first
// layer this is takes int32 ids, or converts another type once); the layer
// has no input gradient, and network::backward(ex, dx) with a dx is an error.
// Weight [Vocabulary, Dimension], initialised U(-sqrt(3), sqrt(3)): mean 0 and
// variance 1 as PyTorch's N(0, 1), from fusor's uniform counter-based draws;
// nn::init_std<N, D> scales it to deviation N / D (GPT-2: nn::init_std<2, 100>,
// which a head tied to the table needs: logits of deviation 1 per channel would
// start the loss far above log(vocabulary)).
// Kept for backward: nothing (the ids are the network's input, still valid).
// Backward: dweight = 0, then row id[t] += dy[t] for every token t. On the
// host the rows are split among threads and each adds its tokens in order:
// deterministic. On the GPU every element is an atomicAdd: the order of the
// additions, so the last bits of a row that many tokens share, may differ
// from run to run. bf16/fp16 layers accumulate in an fp32 table (reserve())
// and round once. Ids outside [0, Vocabulary): the host executor throws
// fusor::error before writing anything; the GPU (no check without a wait)
// writes a zero row and adds no gradient for them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/nn/layer.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::nn {

namespace detail {
template <class Element, class Accumulator>
struct embedding_pass {
  const std::int32_t* ids;
  const Element* rows_in;  // forward: the table; backward: dy
  Element* rows_out;       // forward: y
  Accumulator* table_gradient;
  index_t tokens, vocabulary, dimension;
  FUSOR_HOST_DEVICE bool valid(std::int32_t id) const { return id >= 0 && id < vocabulary; }
};

inline void check_token_ids(const std::int32_t* ids, index_t tokens, index_t vocabulary, index_t sequence) {
  for (index_t t = 0; t < tokens; ++t)
    if (ids[t] < 0 || ids[t] >= vocabulary)
      throw error("fusor::nn::embedding: token id " + std::to_string(ids[t]) + " (sample " +
                  std::to_string(t / sequence) + ", position " + std::to_string(t % sequence) + ") is outside [0, " +
                  std::to_string(vocabulary) + ")");
}

template <class Element, class Accumulator>
void embedding_lookup(const embedding_pass<Element, Accumulator>& p, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(p.tokens * p.dimension);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t t = 0; t < p.tokens; ++t)
    std::copy_n(p.rows_in + index_t(p.ids[t]) * p.dimension, p.dimension, p.rows_out + t * p.dimension);
}

// Thread k owns table rows [k V / team, (k + 1) V / team) and adds its tokens in order.
template <class Element, class Accumulator>
void embedding_scatter_add(const embedding_pass<Element, Accumulator>& p, const host_executor& ex) {
  const int team = ex.thread_count(p.tokens * p.dimension);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (int k = 0; k < team; ++k) {
    const index_t first = p.vocabulary * k / team, last = p.vocabulary * (k + 1) / team;
    for (index_t t = 0; t < p.tokens; ++t) {
      const index_t id = p.ids[t];
      if (id < first || id >= last) continue;
      Accumulator* row = p.table_gradient + id * p.dimension;
      const Element* gradient = p.rows_in + t * p.dimension;
      for (index_t d = 0; d < p.dimension; ++d) row[d] += convert<Accumulator>(gradient[d]);
    }
  }
}

#if FUSOR_HAS_CUDA
template <class Element, class Accumulator>
__global__ void embedding_lookup_kernel(const embedding_pass<Element, Accumulator> p) {
  const index_t n = p.tokens * p.dimension;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += index_t(gridDim.x) * blockDim.x) {
    const index_t t = i / p.dimension, d = i % p.dimension;
    const std::int32_t id = p.ids[t];
    p.rows_out[i] = p.valid(id) ? p.rows_in[index_t(id) * p.dimension + d] : convert<Element>(0.0f);
  }
}
template <class Element, class Accumulator>
__global__ void embedding_scatter_add_kernel(const embedding_pass<Element, Accumulator> p) {
  const index_t n = p.tokens * p.dimension;
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += index_t(gridDim.x) * blockDim.x) {
    const index_t t = i / p.dimension, d = i % p.dimension;
    const std::int32_t id = p.ids[t];
    if (p.valid(id)) atomicAdd(p.table_gradient + index_t(id) * p.dimension + d, convert<Accumulator>(p.rows_in[i]));
  }
}
template <auto Kernel, class Pass>
void launch_embedding(const Pass& p, const cuda_executor& ex) {
  gpu::require("nn::embedding on the cuda executor");
  const index_t n = p.tokens * p.dimension;
  if (n == 0) return;
  constexpr int block = 256;
  const index_t grid = std::min<index_t>((n + block - 1) / block, index_t(gpu::multiprocessor_count()) * 16);
  Kernel<<<int(grid), block, 0, ex.stream>>>(p);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
template <class Element, class Accumulator>
void embedding_lookup(const embedding_pass<Element, Accumulator>& p, const cuda_executor& ex) {
  launch_embedding<embedding_lookup_kernel<Element, Accumulator>>(p, ex);
}
template <class Element, class Accumulator>
void embedding_scatter_add(const embedding_pass<Element, Accumulator>& p, const cuda_executor& ex) {
  launch_embedding<embedding_scatter_add_kernel<Element, Accumulator>>(p, ex);
}
#endif
}  // namespace detail

/// A lookup table of learned vectors, as PyTorch's `nn.Embedding(Vocabulary, Dimension)`: int32 token ids in, one row
/// of the table each out.
///
/// Its input is int32 (input_precision), so it comes first in a network or in a chain that does; ids have no gradient.
/// Weight [Vocabulary, Dimension], initialised with mean 0 and deviation 1, or N / D with `nn::init_std<N, D>`.
template <std::size_t Vocabulary, std::size_t Dimension, class... Policies>
struct embedding {
  static_assert(Vocabulary > 0 && Dimension > 0, "fusor: nn::embedding needs a positive vocabulary and dimension");
  static_assert(Vocabulary <= 2147483647u, "fusor: nn::embedding: token ids are int32");
  /// The layer's policies, resolved (nn/policies.hpp); `nn::init_std<N, D>` sets the initial deviation.
  using policies = layer_policies<row_major, Policies...>;

  /// A sequence of ids, `features<length>`.
  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (is_features_v<F>) return F::rank == 1;
    else return false;
  }();
  /// Named in mismatch errors; any sequence `features<length>` is accepted.
  using expected_input = features<1>;  // a sequence of ids: features<length>
  /// `features<length, Dimension>`: one row per id.
  template <class F>
  using output = features<std::size_t(F::size), Dimension>;

  /// The table given input features F = `features<length>`, the network's precision and a memory Space; x is int32
  /// (input_precision).
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of the table and of y: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// Token ids are int32, not in `precision`.
    using input_precision = std::int32_t;
    /// The element type `precision` stores.
    using element = storage_t<precision>;
    /// F, `features<length>` ids per sample.
    using input_features = F;
    /// `features<length, Dimension>`.
    using output_features = features<std::size_t(F::size), Dimension>;
    /// A batch of token ids, [batch, length].
    using input_view = activation_view<input_precision, input_features, Space>;
    /// A batch of y (or dy), [batch, length, Dimension].
    using output_view = activation_view<precision, output_features, Space>;
    /// The table, [Vocabulary, Dimension].
    using table_view = view<precision, extents<index_t, Vocabulary, Dimension>, row_major, Space>;

    /// weight [Vocabulary, Dimension], drawn `U(-sqrt(3) s, sqrt(3) s)`: mean 0 and deviation s, the policies' init_std
    /// (1 by default).
    static std::vector<parameter_spec> parameters() {
      return {{"weight", {index_t(Vocabulary), index_t(Dimension)}, initializer::uniform_fan_in(1, std::sqrt(3.0) * policies::init_std)}};
    }
    /// Views the bound table and its gradient.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, extents<index_t, Vocabulary, Dimension>>(p.values[0]);
      weight_gradient_ = shaped<precision, extents<index_t, Vocabulary, Dimension>>(p.gradients[0]);
    }
    /// Allocates on `stream` the fp32 table that bf16/fp16 layers accumulate the gradient in (rounded once); nothing
    /// for other layers.
    void reserve(index_t, stream_t stream) {
      if constexpr (!accumulates_in_place)
        accumulator_ = accumulator_tensor(extents<index_t, Vocabulary, Dimension>{}, stream);
    }

    /// Copies row x[t] of the table into y for every token t. Ids outside [0, Vocabulary): the host executor throws
    /// fusor::error before writing anything; the GPU writes a zero row.
    template <class Executor>
    void forward(const input_view& x, const output_view& y, const run_mode&, const Executor& ex) {
      if constexpr (std::is_same_v<Executor, host_executor>)
        detail::check_token_ids(x.data(), x.size(), index_t(Vocabulary), index_t(F::size));
      detail::embedding_lookup(pass(x, weight_.data(), y.data()), ex);
    }
    /// dweight = 0, then row id[t] += dy[t] for every token t (deterministic on the host; atomic adds on the GPU, whose
    /// order may differ from run to run). Throws fusor::error when given a dx: token ids have no gradient.
    template <class Executor>
    void backward(const input_view& x, const output_view&, const output_view& dy, const input_view& dx,
                  const Executor& ex) {
      if (dx.data() != nullptr)
        throw error("fusor::nn::embedding: token ids have no gradient; call the network's backward(executor) "
                    "without an input gradient");
      const auto table = accumulator();
      assign(table, accumulator_element(0), ex);
      detail::embedding_scatter_add(pass(x, dy.data(), nullptr), ex);
      if constexpr (!accumulates_in_place) assign(weight_gradient_, table, ex);
    }

    /// The bound table, [Vocabulary, Dimension].
    table_view weight() const { return weight_; }

   private:
    using accumulator_element = compute_t<precision>;  // fp32 for bf16/fp16 tables
    static constexpr bool accumulates_in_place = std::is_same_v<accumulator_element, element>;
    using accumulator_tensor = tensor<accumulator_element, extents<index_t, Vocabulary, Dimension>, row_major, Space>;

    using accumulator_view = view<accumulator_element, extents<index_t, Vocabulary, Dimension>, row_major, Space>;
    accumulator_view accumulator() const {
      if constexpr (accumulates_in_place) return {weight_gradient_.data(), typename accumulator_view::mapping_type()};
      else return accumulator_.view();
    }
    detail::embedding_pass<element, accumulator_element> pass(const input_view& x, const element* rows_in,
                                                              element* rows_out) const {
      return {x.data(),        rows_in,         rows_out, accumulator().data(), x.size(), index_t(Vocabulary),
              index_t(Dimension)};
    }

    table_view weight_{}, weight_gradient_{};
    accumulator_tensor accumulator_;
  };
};

}  // namespace fusor::nn
