// fusor/kernels/cross_entropy_cuda.hpp — the CUDA kernels of the fused
// softmax cross-entropy (cross_entropy.hpp): per-row loss and logits gradient
// in one pass, the count of rows that are not ignored (for the mean), and the
// single-block, fixed-order reduction of the losses. bf16 and fp16 logits take
// exp's fast form (row_exp in row_reduce.hpp), and where their rows are
// cached, whole 16-byte items at one aligned step they run staged (each
// group fetches its next row into shared memory while it works on one:
// staged_row in row_reduce.hpp). Rows that start between 16-byte boundaries
// (a vocabulary of 50257) are cached as well, through the aligned window
// around each (load_window), where the gradient row's window starts on a
// 16-byte boundary too.
// The kernels' bodies (cross_entropy_rows, count_targets,
// cross_entropy_reduce_block) are written against the Simt policy: the host
// tests run them under the SIMT emulator
// (tests/kernels/row_kernels_emulated.hpp).
#pragma once

#include "fusor/config.hpp"

#include <cstddef>
#include <type_traits>

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/kernels/row_reduce.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/core/buffer.hpp"
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::detail {

// Loss and gradient of one row whose target is not ignored. A staged kernel
// (cross_entropy_staged_rows) gives a cached, contiguous row's items:
// items(k) is this thread's item k, and read_all() is called once all are
// read; without them (null) the row is loaded here. Cached, not staged: the
// row and its gradient row start `first` elements past a 16-byte boundary,
// and move through their windows (load_window).
template <class Group, bool Contiguous, bool Cached, bool WithGradient, class G, class L, class X,
          class Items = std::nullptr_t, class ReadAll = std::nullptr_t>
FUSOR_DEVICE FUSOR_FORCE_INLINE void cross_entropy_row(G* grad, index_t grad_stride, L& loss, const X* in,
                                                       index_t in_stride, int n, index_t target, statistic_t<X> scale,
                                                       [[maybe_unused]] int first = 0,
                                                       [[maybe_unused]] const Items& staged_items = nullptr,
                                                       [[maybe_unused]] const ReadAll& read_all = nullptr) {
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<G, X>;
  constexpr int items = Cached ? cached_items<V, cached_bytes<X>> : 1;
  // 16-bit logits: the fast exp moves the loss by about 1e-6, beneath what
  // their 8 or 11 significant bits resolve; the gradient is stored in 16 bits.
  constexpr bool fast_exp = all_16_bit<X, G>;
  auto load = [&](int c) { return load_columns<Contiguous, V>(in, c, n, in_stride); };
  const bool valid_target = target >= 0 && target < n;
  // Read before the reductions: with dlogits = logits another thread may
  // overwrite this element with its gradient once they are done. Lane 0
  // starts its maximum from it (an element of the row: the row's maximum is
  // the same), so the reductions, and the gradients written after them,
  // depend on the value read: no compiler or warp can move the read later.
  const S target_logit = Group::lane() == 0 && valid_target ? convert<S>(in[target * in_stride]) : S(0);
  const S first_max = Group::lane() == 0 && valid_target ? target_logit : -::cuda::std::numeric_limits<S>::infinity();
  // Cached: the row as fp32 values, then exp(x - max) once the max is known
  // (the gradient reuses it: each element's exp is computed once).
  lanes<S, V> cache[items];
  constexpr bool staged = !std::is_same_v<Items, std::nullptr_t>;
  if constexpr (staged || !Cached) first = 0;
  const int end = first + n;  // the row's columns are window columns [first, end)
  // Lanes outside a loaded row read as -inf: they change neither the maximum
  // nor the sum, so no lane is tested. A staged row's items past its end are
  // whole (first is 0, n a multiple of V), and skipped whole.
  auto inside = [end](int c) { return !staged || c < end; };
  S m, s;
  if constexpr (Cached) {
    m = first_max;
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      lanes<X, V> v;
      if constexpr (staged)
        v = staged_items(k);
      else
        v = load_window<V>(in, c, first, end, -::cuda::std::numeric_limits<float>::infinity());
      const bool inside_k = inside(c);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) {
        cache[k][j] = convert<S>(v[j]);
        if (inside_k) m = ::cuda::std::fmax(m, cache[k][j]);
      }
    }
    if constexpr (!std::is_same_v<ReadAll, std::nullptr_t>) read_all();
    m = Group::all_reduce(m, max_op{});
    s = 0;
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const bool inside_k = inside(Group::template column<V>(k));
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) {
        cache[k][j] = row_exp<fast_exp>(cache[k][j] - m);
        if (inside_k) s += cache[k][j];
      }
    }
    s = Group::all_reduce(s, sum_op{});
  } else {
    max_and_sum<S, fast_exp> stats{first_max, S(0)};  // no element yet: a sum of 0 at any maximum
    for_each_item_batched<Group, V>(n, load,
                                    [&](int c, const lanes<X, V>& v) { stats.add(v, valid_columns(c, n, V)); });
    stats = Group::all_reduce(stats, combine_max_and_sum{});
    m = stats.max;
    s = stats.sum;
  }
  const S nan = ::cuda::std::numeric_limits<S>::quiet_NaN();
  if (Group::lane() == 0) loss = convert<L>(valid_target ? m + ::cuda::std::log(s) - target_logit : nan);
  if constexpr (WithGradient) {
    const S factor = valid_target ? scale / s : nan;
    auto write = [&](int c, const lanes<X, V>& v) {
      lanes<S, V> result;
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j)
        result[j] = row_exp<fast_exp>(convert<S>(v[j]) - m) * factor - (c + j == target ? scale : S(0));
      store_columns<Contiguous, V>(grad, c, n, grad_stride, result);
    };
    if constexpr (Cached) {
      FUSOR_UNROLL
      for (int k = 0; k < items; ++k) {
        const int c = Group::template column<V>(k);
        if (c >= end) continue;
        lanes<S, V> result;
        FUSOR_UNROLL
        for (int j = 0; j < V; ++j) result[j] = cache[k][j] * factor - (c + j - first == target ? scale : S(0));
        if constexpr (staged)
          store_columns<true, V>(grad, c, n, 1, result);
        else
          store_window<V>(grad, c, first, end, result);
      }
    } else {
      for_each_item_batched<Group, V>(n, load, write);
    }
  }
}

// A row whose target is ignored: not read; zero loss, zero gradient
// (`contiguous`: the gradient row is dlogits.vector_row).
template <class Group, bool WithGradient, int V, class G, class L>
FUSOR_DEVICE FUSOR_FORCE_INLINE void cross_entropy_ignored_row([[maybe_unused]] G* grad,
                                                               [[maybe_unused]] index_t grad_stride,
                                                               [[maybe_unused]] bool contiguous, L& loss, int n) {
  if (Group::lane() == 0) loss = convert<L>(0.0f);
  if constexpr (WithGradient) {
    const lanes<float, V> zeros{};
    for (int c = Group::template column<V>(0); c < n; c += Group::threads() * V) {
      if (contiguous)
        store_columns<true, V>(grad, c, n, 1, zeros);
      else
        store_columns<false, V>(grad, c, n, grad_stride, zeros);
    }
  }
}

// The rows of this thread's group: the body of cross_entropy_kernel.
// `count`: rows not ignored, for the mean's scale; null for a plain grad_scale.
template <class Group, bool WithGradient, class G, class L, class X, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE void cross_entropy_rows(const row_matrix<G>& dlogits, const per_row<L>& losses,
                                                        const row_matrix<const X>& logits, const per_row<T>& targets,
                                                        index_t ignore_index, const index_t* count, float grad_scale) {
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<G, X>;
  const int n = int(logits.length);
  const index_t capacity = Group::template capacity<V, cached_bytes<X>>();
  const S scale = count ? S(grad_scale) / S(*count) : S(grad_scale);
  for (index_t r = Group::first_row(); r < logits.rows; r += Group::row_step()) {
    const index_t target = index_t(targets[r]);
    const X* in = logits.row(r);
    G* grad = WithGradient ? dlogits.row(r) : nullptr;
    if (target == ignore_index) {
      cross_entropy_ignored_row<Group, WithGradient, V>(grad, dlogits.column_stride, dlogits.vector_row(grad),
                                                        losses[r], n);
      continue;
    }
    const int first = WithGradient ? window_first(in, grad) : window_first(in);
    if (shares_window(logits, in, first) && (!WithGradient || shares_window(dlogits, grad, first)) &&
        n <= capacity - first) {
      count_shifted_window_row<Group>(first);
      cross_entropy_row<Group, true, true, WithGradient>(grad, 1, losses[r], in, 1, n, target, scale, first);
    } else if (logits.vector_row(in) && (!WithGradient || dlogits.vector_row(grad)))
      cross_entropy_row<Group, true, false, WithGradient>(grad, 1, losses[r], in, 1, n, target, scale);
    else
      cross_entropy_row<Group, false, false, WithGradient>(grad, dlogits.column_stride, losses[r], in,
                                                           logits.column_stride, n, target, scale);
  }
}

// Whether the cross-entropy of X logits with G gradients has a staged kernel
// (staged_row): 16-bit logits in 16-byte items.
template <class G, class X>
inline constexpr bool cross_entropy_stages = sizeof(X) == 2 && sizeof(lanes<X, vector_lanes<G, X>>) == 16;

// Whether the staged kernel takes the rows of `logits` (and `dlogits`) in a
// launch of `shape` (stages_rows).
template <bool WithGradient, class G, class X>
bool cross_entropy_staged(const row_launch& shape, const row_matrix<G>& dlogits, const row_matrix<const X>& logits) {
  constexpr int V = vector_lanes<G, X>;
  if constexpr (WithGradient)
    return stages_rows<V, cached_bytes<X>>(shape, logits, dlogits);
  else
    return stages_rows<V, cached_bytes<X>>(shape, logits);
}

// cross_entropy_rows where cross_entropy_staged holds: the rows come through
// `stage` (staged_row's shared memory), each group's next row fetched while
// it reduces and writes one (for_each_staged_row); an ignored row's copy is
// not read. In place (dlogits = logits), a group writes only its own rows,
// and has fetched a row before it writes any of it. The body of the staged
// cross_entropy_kernel.
template <class Group, bool WithGradient, class G, class L, class X, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE void cross_entropy_staged_rows(const row_matrix<G>& dlogits, const per_row<L>& losses,
                                                               const row_matrix<const X>& logits,
                                                               const per_row<T>& targets, index_t ignore_index,
                                                               const index_t* count, float grad_scale,
                                                               unsigned char* stage) {
  static_assert(cross_entropy_stages<G, X>);
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<G, X>;
  const int n = int(logits.length);
  const S scale = count ? S(grad_scale) / S(*count) : S(grad_scale);
  const index_t x_step = logits.offsets.single_step(), g_step = dlogits.offsets.single_step();
  for_each_staged_row<Group, V, cached_items<V, cached_bytes<X>>>(
      logits.rows, n, stage,
      [&](index_t r, const auto& read_all, const auto& items) {
        const index_t target = index_t(targets[r]);
        G* grad = WithGradient ? dlogits.data + r * g_step : nullptr;
        if (target == ignore_index) {
          read_all();  // the next row is fetched all the same
          cross_entropy_ignored_row<Group, WithGradient, V>(grad, 1, true, losses[r], n);
        } else {
          cross_entropy_row<Group, true, true, WithGradient>(grad, 1, losses[r], logits.data + r * x_step, 1, n, target,
                                                             scale, 0, items, read_all);
        }
      },
      staged_input<X>{logits.data, x_step});
}

#if FUSOR_HAS_CUDA
template <class Group, bool WithGradient, bool Staged, class G, class L, class X, class T>
__global__ void __launch_bounds__(Group::max_block_threads, Group::min_blocks)
    cross_entropy_kernel(const row_matrix<G> dlogits, const per_row<L> losses, const row_matrix<const X> logits,
                         const per_row<T> targets, const index_t ignore_index, const index_t* count,
                         const float grad_scale) {
  extern __shared__ __align__(16) unsigned char staged_rows[];
  if constexpr (Staged)
    cross_entropy_staged_rows<Group, WithGradient>(dlogits, losses, logits, targets, ignore_index, count, grad_scale,
                                                   staged_rows);
  else
    cross_entropy_rows<Group, WithGradient>(dlogits, losses, logits, targets, ignore_index, count, grad_scale);
}

#endif  // FUSOR_HAS_CUDA

// The single-block kernels' size.
inline constexpr int reduce_block_threads = 512;

// The number of rows whose target is not ignore_index, by one block of
// reduce_block_threads: the body of count_targets_kernel.
template <class Simt, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE void count_targets(const per_row<T>& targets, index_t rows, index_t ignore_index,
                                                   index_t* count) {
  index_t mine = 0;
  for (index_t r = Simt::thread(); r < rows; r += Simt::block_threads()) mine += index_t(targets[r]) != ignore_index;
  const index_t total = block_row_group<Simt>::all_reduce(mine, sum_op{});
  if (Simt::thread() == 0) *count = total;
}

// The sum of the losses, divided by the count of rows not ignored for the
// mean, by one block in a fixed order: the body of cross_entropy_reduce_kernel.
template <class Simt, class L, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE void cross_entropy_reduce_block(L* loss, const per_row<const L>& losses,
                                                                const per_row<T>& targets, index_t rows,
                                                                index_t ignore_index, bool mean) {
  using S = statistic_t<L>;
  S sum = 0;
  index_t counted = 0;
  for (index_t r = Simt::thread(); r < rows; r += Simt::block_threads()) {
    sum += convert<S>(losses[r]);
    counted += index_t(targets[r]) != ignore_index;
  }
  const S total = block_row_group<Simt>::all_reduce(sum, sum_op{});
  const index_t total_count = block_row_group<Simt>::all_reduce(counted, sum_op{});
  if (Simt::thread() == 0) *loss = convert<L>(mean ? total / S(total_count) : total);
}

#if FUSOR_HAS_CUDA
template <class T>
__global__ void __launch_bounds__(reduce_block_threads)
    count_targets_kernel(const per_row<T> targets, const index_t rows, const index_t ignore_index, index_t* count) {
  count_targets<device_simt>(targets, rows, ignore_index, count);
}

template <class L, class T>
__global__ void __launch_bounds__(reduce_block_threads)
    cross_entropy_reduce_kernel(L* loss, const per_row<const L> losses, const per_row<T> targets, const index_t rows,
                                const index_t ignore_index, const bool mean) {
  cross_entropy_reduce_block<device_simt>(loss, losses, targets, rows, ignore_index, mean);
}

template <bool WithGradient, class G, class L, class X, class T>
void cross_entropy_cuda(const row_matrix<G>& dlogits, const per_row<L>& losses, const row_matrix<const X>& logits,
                        const per_row<T>& targets, index_t ignore_index, bool mean, float grad_scale,
                        const cuda_executor& ex) {
  gpu::require(WithGradient ? "cross_entropy on the cuda executor" : "cross_entropy_loss on the cuda executor");
  if (logits.rows == 0) return;
  buffer<device_space> count(mean ? sizeof(index_t) : 0, ex.stream);
  if (mean)
    launch_kernel<count_targets_kernel<T>>(1, reduce_block_threads, 0, ex.stream, targets, logits.rows, ignore_index,
                                           count.as<index_t>());
  with_row_group<device_simt, vector_lanes<G, X>, cached_bytes<X>>(logits.length, [&](auto group, row_launch shape) {
    using Group = decltype(group);
    if constexpr (cross_entropy_stages<G, X>) {
      constexpr int V = vector_lanes<G, X>;  // here, not outside the lambda: g++ 12 crashes on that
      using stage = staged_row<Group, X, V, cached_items<V, cached_bytes<X>>>;
      if (launch_staged_rows<cross_entropy_kernel<Group, WithGradient, true, G, L, X, T>>(
              shape, logits.rows, cross_entropy_staged<WithGradient>(shape, dlogits, logits),
              stage::bytes(shape.block_threads), ex.stream, dlogits, losses, logits, targets, ignore_index,
              count.as<const index_t>(), grad_scale))
        return;
    }
    launch_rows<cross_entropy_kernel<Group, WithGradient, false, G, L, X, T>>(shape, logits.rows, 0, ex.stream, dlogits,
                                                                              losses, logits, targets, ignore_index,
                                                                              count.as<const index_t>(), grad_scale);
  });
}

template <class L, class T>
void cross_entropy_reduce_cuda(L* loss, const per_row<const L>& losses, const per_row<T>& targets, index_t rows,
                               index_t ignore_index, bool mean, const cuda_executor& ex) {
  gpu::require("cross_entropy_reduce on the cuda executor");
  launch_kernel<cross_entropy_reduce_kernel<L, T>>(1, reduce_block_threads, 0, ex.stream, loss, losses, targets, rows,
                                                   ignore_index, mean);
}

#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
