// fusor/parallel/powersgd.hpp — a compressed gradient all-reduce: PowerSGD
// (Vogels, Karimireddy and Jaggi, NeurIPS 2019), rank r, with error feedback,
// for one parameter group of a data-parallel step (parallel/data_parallel.hpp,
// data_parallel_options{.communication = gradient_communication::powersgd}).
//
// Each weight matrix's gradient G (n x m, this rank's; the loss gradient is
// already scaled by 1 / ranks, so sums over ranks are averages) is sent as two
// thin matrices instead of n x m values:
//   M = G + E                          E: what earlier steps' approximations left out (this rank's)
//   P = M Q, summed over ranks          Q: m x r, the same on every rank (last step's: a warm start)
//   P = orthonormal columns of P        (Gram-Schmidt)
//   Q = M^T P, summed over ranks        now Q = (sum of M)^T P
//   G' = P Q^T                          the sum's projection onto P's columns, the same on every rank
//   E = M - G' / ranks                  this rank's share of what G' misses
// r (n + m) values cross the wire instead of n m: for a 784 x 512 matrix at
// rank 4, 5,184 instead of 401,408 (77x less). Matrices too small to gain a
// factor of 2 (r (n + m) > n m / 2), and every vector (biases, norms), go
// uncompressed in one packed all-reduce. The P's and Q's of every matrix travel
// packed as well: three collectives a step in all, after backward (no overlap).
// The first `warmup_steps` steps communicate uncompressed (data_parallel's
// bucketed all-reduce): early gradients change fast and compress badly.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fusor/comm/communicator.hpp"
#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/strided_views.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/kernels/matmul.hpp"
#include "fusor/kernels/simt_reduce.hpp"
#include "fusor/kernels/warp_mma.hpp"
#include "fusor/nn/parameters.hpp"
#include "fusor/optim/flat_state.hpp"
#include "fusor/parallel/data_parallel_options.hpp"
#include "fusor/parallel/stream_order.hpp"

namespace fusor::parallel {

namespace detail {

using pmatrix_extents = dextents<index_t, 2>;
template <class Space>
using pmatrix = view<float, pmatrix_extents, row_major, Space>;

// Orthonormal columns of p (n x r, row-major), in place, by modified Gram-Schmidt
// (in double on the host). A column that vanishes stays (near) zero.
inline void orthogonalize_columns(const pmatrix<host_space>& p, const host_executor&) {
  const index_t n = p.extent(0), r = p.extent(1);
  for (index_t i = 0; i < r; ++i) {
    for (index_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (index_t k = 0; k < n; ++k) dot += double(p(k, i)) * double(p(k, j));
      if (j < i) {
        for (index_t k = 0; k < n; ++k) p(k, i) = float(double(p(k, i)) - dot * double(p(k, j)));
      } else {
        const double scale = 1.0 / (std::sqrt(dot) + 1e-8);
        for (index_t k = 0; k < n; ++k) p(k, i) = float(double(p(k, i)) * scale);
      }
    }
  }
}

// The same in one block of orthogonalize_threads threads, in fp32, each dot
// product a block reduction (a fixed tree: deterministic); written against a
// Simt policy (kernels/warp_mma.hpp), so the host tests run it under the SIMT
// emulator. Thread t owns rows t, t + 256, ...: only it reads or writes
// them, so the updates need no barrier between the dot products.
inline constexpr int orthogonalize_threads = 256;
struct orthogonalize_dot_tag;
template <class Simt>
FUSOR_DEVICE void orthogonalize_columns_block(float* p, index_t n, int r) {
  const auto plus = [](float a, float b) { return a + b; };
  for (int i = 0; i < r; ++i) {
    for (int j = 0; j <= i; ++j) {
      float s = 0;
      for (index_t k = Simt::thread(); k < n; k += orthogonalize_threads) s += p[k * r + i] * p[k * r + j];
      const float dot = fusor::detail::block_all_reduce<Simt, orthogonalize_dot_tag>(s, plus);
      if (j < i) {
        for (index_t k = Simt::thread(); k < n; k += orthogonalize_threads) p[k * r + i] -= dot * p[k * r + j];
      } else {
        const float scale = 1.0f / (sqrtf(dot) + 1e-8f);
        for (index_t k = Simt::thread(); k < n; k += orthogonalize_threads) p[k * r + i] *= scale;
      }
    }
  }
}

#if FUSOR_HAS_CUDA
// (A template: a kernel defined in a header must not clash across translation units.)
template <int Threads>
__global__ void __launch_bounds__(Threads) orthogonalize_columns_kernel(float* p, index_t n, int r) {
  static_assert(Threads == orthogonalize_threads, "fusor: the body strides by orthogonalize_threads");
  orthogonalize_columns_block<fusor::detail::device_simt>(p, n, r);
}
inline void orthogonalize_columns(const pmatrix<device_space>& p, const cuda_executor& ex) {
  orthogonalize_columns_kernel<orthogonalize_threads>
      <<<1, orthogonalize_threads, 0, ex.stream>>>(p.data(), p.extent(0), int(p.extent(1)));
  FUSOR_CUDA_CHECK(cudaGetLastError());
}
#endif

// Waits for a collective: the host for a communicator that moves data in its
// calls (MPI), the compute stream for a stream-ordered one (NCCL).
template <class Request, class Communicator, class Executor>
void finish_collective(Request& request, Communicator& communicator, stream_order& order, const Executor& ex) {
  if constexpr (stream_ordered<Communicator>) order.compute_after_communication(communicator, ex);
  else request.wait();
}

}  // namespace detail

/// PowerSGD for one parameter group of a data-parallel step: each large enough weight matrix's gradient is
/// summed over ranks as rank-r factors with error feedback, everything else uncompressed.
template <class Element, class Space>
class powersgd {
  // One compressed matrix: its place in the group and in the packed buffers.
  struct matrix {
    std::size_t slot;               // the group's slot it is
    index_t offset, rows, columns;  // in the group: rows x columns elements from offset
    index_t error_at, p_at, q_at;   // in error_, p_, q_
  };
  struct vector {
    index_t offset, size, packed_at;  // in the group, and in vectors_
  };

 public:
  /// Picks the matrices of `group` worth compressing (r (n + m) <= n m / 2) and makes the error feedback, P, Q
  /// and packed buffers on `stream`, Q drawn from options.seed. Throws fusor::error for a rank below 1 or
  /// negative warmup_steps.
  powersgd(const nn::parameter_group<Element, Space>& group, const powersgd_options& options, stream_t stream)
      : options_(checked(options)) {
    const index_t r = options.rank;
    index_t error = 0, p = 0, q = 0, packed = 0, largest = 0;
    for (std::size_t i = 0; i < group.slots().size(); ++i) {
      const nn::parameter_slot& slot = group.slots()[i];
      const index_t rows = slot.shape.empty() ? 1 : slot.shape[0], columns = rows ? slot.size / rows : 0;
      const bool worth_it = slot.shape.size() >= 2 && 2 * r * (rows + columns) <= rows * columns;
      if (worth_it) {
        matrices_.push_back({i, slot.offset, rows, columns, error, p, q});
        error += slot.size, p += rows * r, q += columns * r, largest = std::max(largest, slot.size);
      } else {
        vectors_at_.push_back({slot.offset, slot.size, packed});
        packed += slot.size;
      }
    }
    error_ = optim::detail::zero_tensor<float, Space>(error, stream);
    p_ = optim::detail::zero_tensor<float, Space>(p, stream);
    q_ = optim::detail::zero_tensor<float, Space>(q, stream);
    approximation_ = optim::detail::zero_tensor<float, Space>(largest, stream);
    vectors_ = optim::detail::zero_tensor<float, Space>(packed, stream);
    // Q starts as the same standard normal draws on every rank.
    std::vector<float> start(static_cast<std::size_t>(q));
    std::mt19937_64 rng(options.seed);
    std::normal_distribution<float> normal;
    for (float& x : start) x = normal(rng);
    copy(q_.view(), view<float, dextents<index_t, 1>>(start.data(), q));
  }

  /// The settings it was made with.
  const powersgd_options& options() const { return options_; }
  /// How many of the group's matrices are compressed.
  std::size_t compressed_matrices() const { return matrices_.size(); }
  /// Bytes this group hands to collectives in a compressed step: the P's, the Q's and the vectors.
  index_t bytes_per_step() const { return (p_.size() + q_.size() + vectors_.size()) * index_t(sizeof(float)); }
  /// Bytes it holds: the error feedback, P, Q, one matrix's approximation, the packed vectors.
  index_t bytes_held() const {
    return (error_.size() + p_.size() + q_.size() + approximation_.size() + vectors_.size()) * index_t(sizeof(float));
  }

  /// fn(slot index in the group, E, Q) for each compressed matrix: the state
  /// that carries from step to step, for a checkpoint. E (rows x columns,
  /// row-major like the gradient) is this rank's; Q (columns x r) the same on
  /// every rank of the group.
  template <class Fn>
  void for_each_matrix_state(Fn&& fn) {
    for (const matrix& m : matrices_)
      fn(m.slot, part(error_.view(), m.error_at, m.rows * m.columns), part(q_.view(), m.q_at, m.columns * options_.rank));
  }

  /// `source`: this rank's gradients of the group (its element type, or the fp32
  /// sum of micro-batches); writes the compressed sum over ranks into `out`
  /// (the group's gradients), ordered on the executor: a collective over `communicator`.
  template <class Source, class Communicator, class Executor>
  void reduce(const Source& source, const optim::flat_view<Element, Space>& out, Communicator& communicator,
              stream_order& order, const Executor& ex) {
    const index_t r = options_.rank;
    for (const vector& v : vectors_at_)
      assign(part(vectors_.view(), v.packed_at, v.size), part(source, v.offset, v.size), ex);
    for (const matrix& m : matrices_) {
      const auto e = part(error_.view(), m.error_at, m.rows * m.columns);
      assign(e, e + part(source, m.offset, m.rows * m.columns), ex);  // M = G + E
      matmul(as_matrix(p_, m.p_at, m.rows, r), as_matrix(error_, m.error_at, m.rows, m.columns),
             as_matrix(q_, m.q_at, m.columns, r), ex);  // P = M Q
    }
    order.communication_after_compute(communicator, ex);
    auto p_sum = communicator.all_reduce(p_.view(), comm::reduction_op::sum);
    auto v_sum = communicator.all_reduce(vectors_.view(), comm::reduction_op::sum);
    detail::finish_collective(p_sum, communicator, order, ex);
    detail::finish_collective(v_sum, communicator, order, ex);
    for (const matrix& m : matrices_) {
      detail::orthogonalize_columns(as_matrix(p_, m.p_at, m.rows, r), ex);
      matmul(as_matrix(q_, m.q_at, m.columns, r), transpose(as_matrix(error_, m.error_at, m.rows, m.columns)),
             as_matrix(p_, m.p_at, m.rows, r), ex);  // Q = M^T P
    }
    order.communication_after_compute(communicator, ex);
    auto q_sum = communicator.all_reduce(q_.view(), comm::reduction_op::sum);
    detail::finish_collective(q_sum, communicator, order, ex);
    const float share = 1.0f / float(communicator.size());
    for (const matrix& m : matrices_) {
      const index_t n = m.rows * m.columns;
      const auto approximation = part(approximation_.view(), 0, n);
      matmul(as_matrix(approximation_, 0, m.rows, m.columns), as_matrix(p_, m.p_at, m.rows, r),
             transpose(as_matrix(q_, m.q_at, m.columns, r)), ex);  // G' = P Q^T
      const auto e = part(error_.view(), m.error_at, n);
      assign(e, e - approximation * share, ex);  // E = M - G' / ranks
      assign(part(out, m.offset, n), approximation, ex);
    }
    for (const vector& v : vectors_at_)
      assign(part(out, v.offset, v.size), part(vectors_.view(), v.packed_at, v.size), ex);
  }

 private:
  static powersgd_options checked(const powersgd_options& o) {
    if (o.rank < 1)
      throw error("fusor::parallel::powersgd: the rank must be at least 1, not " + std::to_string(o.rank));
    if (o.warmup_steps < 0)
      throw error("fusor::parallel::powersgd: warmup_steps must be 0 or more, not " + std::to_string(o.warmup_steps));
    return o;
  }
  template <class P>
  static optim::flat_view<P, Space> part(const optim::flat_view<P, Space>& v, index_t begin, index_t count) {
    return {v.data() + begin, count};
  }
  static detail::pmatrix<Space> as_matrix(const optim::flat_tensor<float, Space>& t, index_t at, index_t rows,
                                          index_t columns) {
    return detail::pmatrix<Space>(t.data() + at, rows, columns);
  }

  powersgd_options options_;
  std::vector<matrix> matrices_;
  std::vector<vector> vectors_at_;
  optim::flat_tensor<float, Space> error_, p_, q_, approximation_, vectors_;
};

}  // namespace fusor::parallel
