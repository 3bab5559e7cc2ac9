// tests/kernels/row_kernels_emulated.hpp — the row-wise CUDA kernels' bodies
// (softmax_cuda.hpp, cross_entropy_cuda.hpp, layernorm_cuda.hpp) run on the
// host by the SIMT emulator (simt_emulator.hpp), launched as launch_rows
// launches them on an sm_90 GPU: the group and launch shape with_row_group
// chooses, clusters of blocks included. Host builds only.
#pragma once

#include <fusor/config.hpp>

#if !FUSOR_HAS_CUDA
#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include <fusor/core/cuda_runtime.hpp>
#include <fusor/kernels/cross_entropy_cuda.hpp>
#include <fusor/kernels/layernorm_cuda.hpp>
#include <fusor/kernels/row_reduce.hpp>
#include <fusor/kernels/simt_emulator.hpp>
#include <fusor/kernels/softmax_cuda.hpp>

namespace rowwise_test::emulated {

namespace fd = fusor::detail;
using fusor::index_t;

// body() in every thread of the grid `shape` takes over `rows` rows, in
// clusters where the shape has them (as on an sm_90 GPU that holds them).
template <class Body>
void launch_rows(const fd::row_launch& shape, index_t rows, const Body& body) {
  fd::emulate_kernel(fd::simt_grid{fd::row_grid(shape, rows), 1}, shape.block_threads, 0,
                     [&](unsigned char*) { body(); }, shape.cluster_blocks);
}

// As launch_staged_rows: body(shared) in one wave of blocks, each with
// `shared_bytes` of staged_row's shared memory, and true; or false, having
// run nothing, where the rows are not staged (`staged`: stages_rows) or the
// wave gives no group a second row. The wave is two blocks or two clusters
// here (the GPU's occupancy there), so that groups take several rows each,
// and some one more than others.
template <class Body>
bool launch_staged_rows(const fd::row_launch& shape, index_t rows, bool staged, std::size_t shared_bytes,
                        const Body& body) {
  const int grid = fd::staged_row_grid(shape, rows, 2 * shape.cluster_blocks);
  if (!staged || grid == 0) return false;
  fd::emulate_kernel(fd::simt_grid{grid, 1}, shape.block_threads, shared_bytes, body, shape.cluster_blocks);
  fusor::gpu::staged_launch_counter().fetch_add(1);
  return true;
}

// The staged kernel's body where softmax_cuda launches it, else the plain one's.
template <bool Log, class Y, class X>
void softmax(const fd::row_matrix<Y>& y, const fd::row_matrix<const X>& x) {
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<X, Y>, fd::cached_bytes<X>>(
      x.length, [&](auto group, fd::row_launch shape) {
        using G = decltype(group);
        if constexpr (fd::softmax_stages<Y, X>) {
          constexpr int V = fd::vector_lanes<X, Y>;  // here, not outside the lambda: g++ 12 crashes on that
          using stage = fd::staged_row<G, X, V, fd::cached_items<V, fd::cached_bytes<X>>>;
          if (launch_staged_rows(shape, x.rows, fd::stages_rows<V, fd::cached_bytes<X>>(shape, x, y),
                                 stage::bytes(shape.block_threads),
                                 [&](unsigned char* shared) { fd::softmax_staged_rows<G, Log>(y, x, shared); }))
            return;
        }
        launch_rows(shape, x.rows, [&] { fd::softmax_rows<G, Log>(y, x); });
      });
}

template <bool Log, class Y, class E, std::size_t Rank>
void softmax_expression(const fd::row_matrix<Y>& y, const fd::expression_rows<E, Rank>& x) {
  using X = fd::expression_row_value_t<E, Rank>;
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<X, Y>, fd::cached_bytes<X>>(
      y.length, [&](auto group, fd::row_launch shape) {
        launch_rows(shape, y.rows, [&] { fd::softmax_expression_rows<decltype(group), Log>(y, x); });
      });
}

template <bool Log, class DX, class Y, class DY>
void softmax_backward(const fd::row_matrix<DX>& dx, const fd::row_matrix<const Y>& y,
                      const fd::row_matrix<const DY>& dy) {
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<DX, Y, DY>, fd::cached_bytes<Y, DY>>(
      y.length, [&](auto group, fd::row_launch shape) {
        launch_rows(shape, y.rows, [&] { fd::softmax_backward_rows<decltype(group), Log>(dx, y, dy); });
      });
}

// cross_entropy_cuda's launches: with `mean`, the count of rows not ignored
// (one block), then the rows.
template <bool WithGradient, class G, class L, class X, class T>
void cross_entropy(const fd::row_matrix<G>& dlogits, const fd::per_row<L>& losses,
                   const fd::row_matrix<const X>& logits, const fd::per_row<T>& targets, index_t ignore_index,
                   bool mean, float grad_scale) {
  index_t counted = -1;
  if (mean)
    fd::emulate_kernel(fd::simt_grid{1, 1}, fd::reduce_block_threads, 0, [&](unsigned char*) {
      fd::count_targets<fd::emulated_simt>(targets, logits.rows, ignore_index, &counted);
    });
  const index_t* const count = mean ? &counted : nullptr;
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<G, X>, fd::cached_bytes<X>>(
      logits.length, [&](auto group, fd::row_launch shape) {
        using Group = decltype(group);
        if constexpr (fd::cross_entropy_stages<G, X>) {
          constexpr int V = fd::vector_lanes<G, X>;  // here, not outside the lambda: g++ 12 crashes on that
          using stage = fd::staged_row<Group, X, V, fd::cached_items<V, fd::cached_bytes<X>>>;
          if (launch_staged_rows(shape, logits.rows, fd::cross_entropy_staged<WithGradient>(shape, dlogits, logits),
                                 stage::bytes(shape.block_threads), [&](unsigned char* shared) {
                                   fd::cross_entropy_staged_rows<Group, WithGradient>(
                                       dlogits, losses, logits, targets, ignore_index, count, grad_scale, shared);
                                 }))
            return;
        }
        launch_rows(shape, logits.rows, [&] {
          fd::cross_entropy_rows<Group, WithGradient>(dlogits, losses, logits, targets, ignore_index, count,
                                                      grad_scale);
        });
      });
}

// The staged kernel's body where norm_forward_cuda launches it, else the plain one's.
template <bool Centered, class Y, class M, class R, class X, class W, class B>
void norm_forward(const fd::norm_forward<Y, M, R, X, W, B>& f, float epsilon) {
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<Y, X, W, B>, fd::cached_bytes<X>>(
      f.x.length, [&](auto group, fd::row_launch shape) {
        using G = decltype(group);
        if constexpr (fd::norm_forward_stages<Y, X, W, B>) {
          constexpr int V = fd::vector_lanes<Y, X, W, B>;  // here, not outside the lambda: g++ 12 crashes on that
          using stage = fd::staged_row<G, X, V, fd::cached_items<V, fd::cached_bytes<X>>>;
          if (launch_staged_rows(
                  shape, f.x.rows, fd::norm_forward_staged<Centered>(shape, f), stage::bytes(shape.block_threads),
                  [&](unsigned char* shared) { fd::norm_forward_staged_rows<G, Centered>(f, epsilon, shared); }))
            return;
        }
        launch_rows(shape, f.x.rows, [&] { fd::norm_forward_rows<G, Centered>(f, epsilon); });
      });
}

// The launches of norm_backward_launch, by plan_norm_backward for a GPU of
// two multiprocessors, 227 KiB of shared memory a block and three blocks or
// clusters resident (so that a group takes several rows); the sums kernel in
// at most four blocks (it strides over the columns past them).
template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward(const fd::norm_backward<DX, DW, DB, DY, X, W, M, R>& b) {
  using S = fd::statistic_t<X>;
  constexpr int V = fd::vector_lanes<DX, DY, X, W>;
  const index_t n = b.x.length, width = Centered ? 2 * n : n;
  fd::with_row_group<fd::emulated_simt, V, fd::cached_bytes<X, DY>>(n, [&](auto group, fd::row_launch shape) {
    using Group = decltype(group);
    std::size_t staging_bytes = 0;
    if constexpr (fd::norm_backward_stages<DX, DY, X, W>)
      if (fd::norm_backward_staged(shape, b))
        staging_bytes =
            2 * fd::staged_row<Group, X, V, fd::cached_items<V, fd::cached_bytes<X, DY>>>::bytes(shape.block_threads);
    const fd::norm_backward_plan plan = fd::plan_norm_backward<Group, V, Centered, S>(
        b.x.rows, n, shape, std::size_t(227) << 10, 2,
        [](index_t wanted, std::size_t, bool) { return int(std::min<index_t>(wanted, 3)); }, staging_bytes);
    std::vector<S> partials(std::size_t(plan.partial_rows * width), std::numeric_limits<S>::quiet_NaN());
    if (plan.accumulate) {
      fd::emulate_kernel(
          fd::simt_grid{plan.partial_rows * shape.cluster_blocks, 1}, shape.block_threads, plan.shared_bytes,
          [&](unsigned char* shared) {
            if constexpr (fd::norm_backward_stages<DX, DY, X, W>)
              if (plan.staged) {
                fd::norm_backward_rows<Group, Centered, true, true>(b, partials.data(), shared);
                return;
              }
            fd::norm_backward_rows<Group, Centered, true>(b, partials.data(), shared);
          },
          shape.cluster_blocks);
      if (plan.staged) fusor::gpu::staged_launch_counter().fetch_add(1);
    } else {
      launch_rows(shape, b.x.rows,
                  [&] { fd::norm_backward_rows<Group, Centered, false>(b, static_cast<S*>(nullptr), nullptr); });
      fd::emulate_kernel(fd::simt_grid{plan.column_blocks, plan.partial_rows}, fd::parameter_threads, 0,
                         [&](unsigned char*) {
                           fd::norm_parameter_partials<fd::emulated_simt, Centered>(b, plan.rows_per_chunk,
                                                                                     partials.data());
                         });
    }
    fd::emulate_kernel(fd::simt_grid{std::clamp<index_t>((n + 31) / 32, 1, 4), 1}, 32 * fd::sums_slices, 0,
                       [&](unsigned char*) {
                         fd::norm_parameter_sums<fd::emulated_simt, Centered>(partials.data(), plan.partial_rows, n,
                                                                              b.dweight, b.dbias);
                       });
  });
}

}  // namespace rowwise_test::emulated

#endif  // !FUSOR_HAS_CUDA
