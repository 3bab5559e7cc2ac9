// fusor/kernels/softmax_cuda.hpp — the CUDA kernels of softmax and
// log-softmax (softmax.hpp), forward and backward.
//
// A warp, a block of 64 to 1024 threads or (sm_90) a cluster of blocks per
// row, the smallest whose registers hold the row (row_reduce.hpp). A
// contiguous row that fits in registers is read once: max, then the sum of
// exp(x - max), both over the cached values, then the outputs. A row that
// starts between 16-byte boundaries (lengths not a multiple of V) is cached
// too, through the aligned window around it (load_window), where its output
// row's window starts on a 16-byte boundary as well; so is an expression's
// row (evaluated element by element) whose output is contiguous. Any other
// row (longer, strided, its output shifted otherwise) is read twice, several
// items a thread at a time: an online max and sum in one pass, then the
// outputs.
// Softmax stored in bf16 or fp16 takes exp's fast form (row_exp in
// row_reduce.hpp); fp32 and log-softmax the accurate one. One launch per call.
// The forward of 16-bit rows that are cached, whole 16-byte items at one
// aligned step runs staged: one wave of groups, each fetching its next row
// into shared memory while it works on one (staged_row in row_reduce.hpp).
//
// The kernels' bodies (softmax_rows, softmax_expression_rows,
// softmax_backward_rows) take the group as a template parameter and the group
// its Simt policy: the host tests run them under the SIMT emulator
// (tests/kernels/row_kernels_emulated.hpp).
#pragma once

#include "fusor/config.hpp"

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include "fusor/kernels/row_reduce.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::detail {

// One contiguous row, read once into registers (at most Group::capacity
// elements) as fp32 values; softmax keeps exp(x - max) there after the sum, so
// each element's exp is computed once (bf16 rows were bound by computing it
// twice).
// items(k) gives this thread's item k of the window around the row (from
// memory, load_window, or from a staged row), and read_all() is called once
// all are read. The row starts `first` elements past a 16-byte boundary,
// and `out`'s window (`first` elements before it) on one too. Lanes outside the row read as -inf: they change
// neither the maximum nor the sum, so no lane is tested. Whole (a staged
// row): first is 0 and n a multiple of V, and items past the row's end are
// skipped whole instead.
template <class Group, bool Log, bool Whole, class X, class Y, class Items, class ReadAll>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_row_cached(Y* out, const Items& row_items, int n, int first,
                                                        const ReadAll& read_all) {
  constexpr int V = vector_lanes<X, Y>;
  using S = statistic_t<X>;
  constexpr int items = cached_items<V, cached_bytes<X>>;
  constexpr bool fast_exp = !Log && all_16_bit<Y>;
  if constexpr (Whole) first = 0;
  const int end = first + n;  // the row's columns are window columns [first, end)
  auto inside = [end](int c) { return !Whole || c < end; };
  lanes<S, V> cache[items];
  S m = -::cuda::std::numeric_limits<S>::infinity();
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const bool inside_k = inside(Group::template column<V>(k));
    const lanes<X, V> v = row_items(k);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      cache[k][j] = convert<S>(v[j]);
      if (inside_k) m = ::cuda::std::fmax(m, cache[k][j]);
    }
  }
  read_all();
  m = Group::all_reduce(m, max_op{});
  S s = 0;
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const bool inside_k = inside(Group::template column<V>(k));
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S e = row_exp<fast_exp>(cache[k][j] - m);
      if constexpr (!Log) cache[k][j] = e;
      if (inside_k) s += e;
    }
  }
  s = Group::all_reduce(s, sum_op{});
  const S log_s = ::cuda::std::log(s), inverse = S(1) / s;
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const int c = Group::template column<V>(k);
    if (c >= end) continue;
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) result[j] = Log ? cache[k][j] - m - log_s : cache[k][j] * inverse;
    if constexpr (Whole)
      store_columns<true, V>(out, c, n, 1, result);
    else
      store_window<V>(out, c, first, end, result);
  }
}
// One row of any length, read twice: online max and sum, then the outputs.
template <class Group, bool Contiguous, bool Log, class Y, class In>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_row_looped(Y* out, const In& in, int n, index_t out_stride,
                                                      index_t in_stride) {
  using X = row_value_t<In>;
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<X, Y>;
  constexpr bool fast_exp = !Log && all_16_bit<Y>;
  auto load = [&](int c) { return load_columns<Contiguous, V>(in, c, n, in_stride); };
  max_and_sum<S, fast_exp> stats{-::cuda::std::numeric_limits<S>::infinity(), S(0)};
  for_each_item_batched<Group, V>(n, load, [&](int c, const lanes<X, V>& v) { stats.add(v, valid_columns(c, n, V)); });
  stats = Group::all_reduce(stats, combine_max_and_sum{});
  const S m = stats.max, log_s = ::cuda::std::log(stats.sum), inverse = S(1) / stats.sum;
  for_each_item_batched<Group, V>(n, load, [&](int c, const lanes<X, V>& v) {
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S e = convert<S>(v[j]);
      result[j] = Log ? e - m - log_s : row_exp<fast_exp>(e - m) * inverse;
    }
    store_columns<Contiguous, V>(out, c, n, out_stride, result);
  });
}

// The rows of this thread's group: contiguous rows whose windows fit are
// cached; any other row is read twice. The body of softmax_kernel (and of
// the emulated kernel the host tests run).
template <class Group, bool Log, class Y, class X>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_rows(const row_matrix<Y>& y, const row_matrix<const X>& x) {
  constexpr int V = vector_lanes<X, Y>;
  const int n = int(x.length);
  const index_t capacity = Group::template capacity<V, cached_bytes<X>>();
  for (index_t r = Group::first_row(); r < x.rows; r += Group::row_step()) {
    const X* in = x.row(r);
    Y* out = y.row(r);
    const int first = window_first(in, out);
    if (shares_window(x, in, first) && shares_window(y, out, first) && n <= capacity - first) {
      count_shifted_window_row<Group>(first);
      constexpr float minus_infinity = -::cuda::std::numeric_limits<float>::infinity();
      softmax_row_cached<Group, Log, false, X>(
          out,
          [&](int k) { return load_window<V>(in, Group::template column<V>(k), first, first + n, minus_infinity); }, n,
          first, [] {});
    } else if (x.vector_row(in) && y.vector_row(out)) {
      softmax_row_looped<Group, true, Log>(out, in, n, 1, 1);
    } else {
      softmax_row_looped<Group, false, Log>(out, in, n, y.column_stride, x.column_stride);
    }
  }
}

// Whether softmax of X into Y has a staged kernel (staged_row): 16-bit
// inputs, whose cached rows hold half an fp32 row's bytes.
template <class Y, class X>
inline constexpr bool softmax_stages = sizeof(X) == 2 && sizeof(lanes<X, vector_lanes<X, Y>>) == 16;

// softmax_rows where stages_rows holds (every row cached, whole items, at a
// fixed step from a 16-byte-aligned start): the rows come through `stage`
// (staged_row's shared memory), each group's next row fetched while it
// reduces and writes one (for_each_staged_row). The body of the staged
// softmax_kernel.
template <class Group, bool Log, class Y, class X>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_staged_rows(const row_matrix<Y>& y, const row_matrix<const X>& x,
                                                         unsigned char* stage) {
  static_assert(softmax_stages<Y, X>);
  constexpr int V = vector_lanes<X, Y>;
  const int n = int(x.length);
  const index_t y_step = y.offsets.single_step();
  for_each_staged_row<Group, V, cached_items<V, cached_bytes<X>>>(
      x.rows, n, stage,
      [&](index_t r, const auto& read_all, const auto& items) {
        softmax_row_cached<Group, Log, true, X>(y.data + r * y_step, items, n, 0, read_all);
      },
      staged_input<X>{x.data, x.offsets.single_step()});
}

// The softmax (or log-softmax) backward's value of one column: dy - exp(y) sum
// or y (dy - sum), where sum is the row's total of dy (or dy * y).
template <bool Log, class S, int V, class Y, class DY>
FUSOR_DEVICE FUSOR_FORCE_INLINE lanes<S, V> softmax_backward_columns(const lanes<Y, V>& yv, const lanes<DY, V>& g,
                                                                     S sum) {
  lanes<S, V> result;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) {
    const S yj = convert<S>(yv[j]), gj = convert<S>(g[j]);
    result[j] = Log ? gj - ::cuda::std::exp(yj) * sum : yj * (gj - sum);
  }
  return result;
}

// dx for one contiguous row cached in registers, read through the windows
// around y, dy and dx (load_window), which start `first` elements past a
// 16-byte boundary (0 where aligned). Lanes outside the row read as zero, so
// their terms of the sum are zero and no lane is tested.
template <class Group, bool Log, class DX, class Y, class DY>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_backward_row_cached(DX* dxr, const Y* yr, const DY* dyr, int n,
                                                                 int first) {
  using S = statistic_t<Y>;
  constexpr int V = vector_lanes<DX, Y, DY>;
  constexpr int items = cached_items<V, cached_bytes<Y, DY>>;
  const int end = first + n;
  lanes<Y, V> ycache[items];
  lanes<DY, V> gcache[items];
  S sum = 0;
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const int c = Group::template column<V>(k);
    ycache[k] = load_window<V>(yr, c, first, end, 0.0f);
    gcache[k] = load_window<V>(dyr, c, first, end, 0.0f);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      sum += Log ? convert<S>(gcache[k][j]) : convert<S>(gcache[k][j]) * convert<S>(ycache[k][j]);
  }
  sum = Group::all_reduce(sum, sum_op{});
  FUSOR_UNROLL
  for (int k = 0; k < items; ++k) {
    const int c = Group::template column<V>(k);
    if (c < end) store_window<V>(dxr, c, first, end, softmax_backward_columns<Log>(ycache[k], gcache[k], sum));
  }
}

// dx for one row of any length, read twice: the sum, then dx.
template <class Group, bool Contiguous, bool Log, class DX, class Y, class DY>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_backward_row_looped(DX* dxr, const Y* yr, const DY* dyr, int n,
                                                                 const row_matrix<DX>& dx, const row_matrix<const Y>& y,
                                                                 const row_matrix<const DY>& dy) {
  using S = statistic_t<Y>;
  constexpr int V = vector_lanes<DX, Y, DY>;
  struct item {
    lanes<Y, V> y;
    lanes<DY, V> dy;
  };
  auto load = [&](int c) {
    return item{load_columns<Contiguous, V>(yr, c, n, y.column_stride),
                load_columns<Contiguous, V>(dyr, c, n, dy.column_stride)};
  };
  S sum = 0;
  // Columns past the end read as zero: their terms are zero.
  for_each_item_batched<Group, V>(n, load, [&](int, const item& t) {
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) sum += Log ? convert<S>(t.dy[j]) : convert<S>(t.dy[j]) * convert<S>(t.y[j]);
  });
  sum = Group::all_reduce(sum, sum_op{});
  for_each_item_batched<Group, V>(n, load, [&](int c, const item& t) {
    store_columns<Contiguous, V>(dxr, c, n, dx.column_stride, softmax_backward_columns<Log>(t.y, t.dy, sum));
  });
}

// The rows of this thread's group: the body of softmax_backward_kernel. A
// contiguous row whose window fits the group's registers is cached (y, dy
// and dx sharing the window: aligned rows, and rows of any length whose
// operands line up); any other row is read twice.
template <class Group, bool Log, class DX, class Y, class DY>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_backward_rows(const row_matrix<DX>& dx, const row_matrix<const Y>& y,
                                                           const row_matrix<const DY>& dy) {
  constexpr int V = vector_lanes<DX, Y, DY>;
  const int n = int(y.length);
  const index_t capacity = Group::template capacity<V, cached_bytes<Y, DY>>();
  for (index_t r = Group::first_row(); r < y.rows; r += Group::row_step()) {
    const Y* yr = y.row(r);
    const DY* dyr = dy.row(r);
    DX* dxr = dx.row(r);
    const int first = window_first(dxr, dyr, yr);
    if (shares_window(y, yr, first) && shares_window(dy, dyr, first) && shares_window(dx, dxr, first) &&
        n <= capacity - first) {
      count_shifted_window_row<Group>(first);
      softmax_backward_row_cached<Group, Log>(dxr, yr, dyr, n, first);
    } else if (y.vector_row(yr) && dy.vector_row(dyr) && dx.vector_row(dxr))
      softmax_backward_row_looped<Group, true, Log>(dxr, yr, dyr, n, dx, y, dy);
    else
      softmax_backward_row_looped<Group, false, Log>(dxr, yr, dyr, n, dx, y, dy);
  }
}

// The values of an expression's rows.
template <class E, std::size_t Rank>
using expression_row_value_t = row_value_t<typename expression_rows<E, Rank>::reader>;

// softmax of an expression, element by element (no 16-byte vectors on the
// input): a row whose output's window fits the group's registers is
// evaluated once into them (the cached path: out through its window); any
// other row is evaluated twice. The body of softmax_expression_kernel.
template <class Group, bool Log, class Y, class E, std::size_t Rank>
FUSOR_DEVICE FUSOR_FORCE_INLINE void softmax_expression_rows(const row_matrix<Y>& y,
                                                             const expression_rows<E, Rank>& x) {
  using X = expression_row_value_t<E, Rank>;
  constexpr int V = vector_lanes<X, Y>;
  const int n = int(y.length);
  const index_t capacity = Group::template capacity<V, cached_bytes<X>>();
  for (index_t r = Group::first_row(); r < y.rows; r += Group::row_step()) {
    Y* out = y.row(r);
    const auto in = x.row(r);
    const int first = window_first(out);
    if (shares_window(y, out, first) && n <= capacity - first) {
      count_shifted_window_row<Group>(first);
      constexpr float minus_infinity = -::cuda::std::numeric_limits<float>::infinity();
      auto items = [&](int k) {
        const int c = Group::template column<V>(k) - first;  // the item's first row column
        lanes<X, V> v;
        FUSOR_UNROLL
        for (int j = 0; j < V; ++j) v[j] = c + j >= 0 && c + j < n ? X(in[c + j]) : convert<X>(minus_infinity);
        return v;
      };
      softmax_row_cached<Group, Log, false, X>(out, items, n, first, [] {});
    } else {
      softmax_row_looped<Group, false, Log>(out, in, n, y.column_stride, 1);
    }
  }
}

#if FUSOR_HAS_CUDA
template <class Group, bool Log, bool Staged, class Y, class X>
__global__ void __launch_bounds__(Group::max_block_threads, Group::min_blocks)
    softmax_kernel(const row_matrix<Y> y, const row_matrix<const X> x) {
  extern __shared__ __align__(16) unsigned char staged_rows[];
  if constexpr (Staged)
    softmax_staged_rows<Group, Log>(y, x, staged_rows);
  else
    softmax_rows<Group, Log>(y, x);
}

template <class Group, bool Log, class Y, class E, std::size_t Rank>
__global__ void __launch_bounds__(Group::max_block_threads, Group::min_blocks)
    softmax_expression_kernel(const row_matrix<Y> y, const expression_rows<E, Rank> x) {
  softmax_expression_rows<Group, Log>(y, x);
}

template <class Group, bool Log, class DX, class Y, class DY>
__global__ void __launch_bounds__(Group::max_block_threads, Group::min_blocks)
    softmax_backward_kernel(const row_matrix<DX> dx, const row_matrix<const Y> y, const row_matrix<const DY> dy) {
  softmax_backward_rows<Group, Log>(dx, y, dy);
}

template <bool Log, class Y, class X>
void softmax_cuda(const row_matrix<Y>& y, const row_matrix<const X>& x, const cuda_executor& ex) {
  gpu::require("softmax on the cuda executor");
  if (x.rows == 0 || x.length == 0) return;
  with_row_group<device_simt, vector_lanes<X, Y>, cached_bytes<X>>(x.length, [&](auto group, row_launch shape) {
    using G = decltype(group);
    if constexpr (softmax_stages<Y, X>) {
      constexpr int V = vector_lanes<X, Y>;  // here, not outside the lambda: g++ 12 crashes on that
      using stage = staged_row<G, X, V, cached_items<V, cached_bytes<X>>>;
      if (launch_staged_rows<softmax_kernel<G, Log, true, Y, X>>(shape, x.rows,
                                                                 stages_rows<V, cached_bytes<X>>(shape, x, y),
                                                                 stage::bytes(shape.block_threads), ex.stream, y, x))
        return;
    }
    launch_rows<softmax_kernel<G, Log, false, Y, X>>(shape, x.rows, 0, ex.stream, y, x);
  });
}

template <bool Log, class Y, class E, std::size_t Rank>
void softmax_expression_cuda(const row_matrix<Y>& y, const expression_rows<E, Rank>& x, const cuda_executor& ex) {
  gpu::require("softmax on the cuda executor");
  if (y.rows == 0 || y.length == 0) return;
  using X = expression_row_value_t<E, Rank>;
  with_row_group<device_simt, vector_lanes<X, Y>, cached_bytes<X>>(y.length, [&](auto group, row_launch shape) {
    launch_rows<softmax_expression_kernel<decltype(group), Log, Y, E, Rank>>(shape, y.rows, 0, ex.stream, y, x);
  });
}

template <bool Log, class DX, class Y, class DY>
void softmax_backward_cuda(const row_matrix<DX>& dx, const row_matrix<const Y>& y, const row_matrix<const DY>& dy,
                           const cuda_executor& ex) {
  gpu::require("softmax_backward on the cuda executor");
  if (y.rows == 0 || y.length == 0) return;
  with_row_group<device_simt, vector_lanes<DX, Y, DY>, cached_bytes<Y, DY>>(
      y.length, [&](auto group, row_launch shape) {
        launch_rows<softmax_backward_kernel<decltype(group), Log, DX, Y, DY>>(shape, y.rows, 0, ex.stream, dx, y, dy);
      });
}

#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
