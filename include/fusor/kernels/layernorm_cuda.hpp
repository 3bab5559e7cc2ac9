// fusor/kernels/layernorm_cuda.hpp — the CUDA kernels of layernorm and rmsnorm
// (layernorm.hpp), forward and backward.
//
// Forward: a warp (rows up to 1024 elements), a block of 64 to 1024 threads
// or on sm_90 a cluster of up to sixteen 512-thread blocks per row, the smallest
// whose registers hold the row (row_reduce.hpp). A contiguous row that fits in
// registers (up to 32768 elements, clusters 262144) is read once and its
// variance is two-pass from registers; a longer or strided row is read twice,
// with Welford's running mean and M2 combined over the group. One launch.
//
// Backward: where the accumulator rows fit in shared memory, each group
// (warp, block or cluster) owns an accumulator row for dweight (and dbias)
// into which each thread adds only the columns it owns, so no atomics are
// needed; a cluster's row is split among its blocks, each keeping its own
// threads' columns. At the end each block sums its groups in order into one
// partial row (a cluster's blocks each write their columns of one). Rows
// whose accumulators do not fit (rows longer than a cluster holds, which a
// 512-thread block reads twice; their accumulators would live in global
// memory, read and written for every row: 0.04x of the copy bandwidth on an
// H200), or whose clusters do not run here, get dx alone from the row
// kernel, then a column kernel sums dy * xhat (and dy) over chunks of rows
// into one partial row per chunk, reading x and dy once more. A last kernel
// sums the partial rows in a fixed order, 32 columns and eight slices of rows
// a block: dweight and dbias are deterministic for a given device and shape.
// Two or three launches.
//
// 16-bit rows that are cached, whole 16-byte items at one aligned step run
// staged, forward and in the accumulating backward kernel: each group
// fetches its next row (x, and dy) into shared memory while it works on one
// (staged_row in row_reduce.hpp); the forward then launches one wave of groups.
//
// Rows and element offsets are index_t (tensors past 2^31 elements); columns
// within a row are int, rows being at most detail::max_row_length (rows.hpp,
// checked before the launch), and an accumulator row of 2n is indexed in index_t.
//
// The kernels' bodies (norm_forward_rows, norm_backward_rows,
// norm_parameter_partials, norm_parameter_sums) are written against the Simt
// policy, every shared-memory access through it: the host tests run them
// under the SIMT emulator (tests/kernels/row_kernels_emulated.hpp), with the
// launch arithmetic of plan_norm_backward.
#pragma once

#include "fusor/config.hpp"

#include <algorithm>
#include <cstddef>

#include <cuda/std/cmath>

#include "fusor/kernels/layernorm_host.hpp"
#include "fusor/kernels/row_reduce.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/core/buffer.hpp"
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::detail {

template <class S>
struct two_sums {
  S first;
  S second;
};
struct add_two_sums {
  template <class S>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE two_sums<S> operator()(const two_sums<S>& a, const two_sums<S>& b) const {
    return {a.first + b.first, a.second + b.second};
  }
};

// ---- forward -----------------------------------------------------------------------------
// Mean and rstd of one row; `Cached`: the row fits the group's registers.
// A staged kernel (norm_forward_staged_rows) gives a cached, contiguous
// row's items: items(k) is this thread's item k, and read_all() is called
// once all are read; without them (null) the row is loaded here.
template <class Group, bool Centered, bool Contiguous, bool Cached, class F, class Items = std::nullptr_t,
          class ReadAll = std::nullptr_t>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_forward_row(const F& f, index_t r, float epsilon,
                                                      [[maybe_unused]] const Items& staged_items = nullptr,
                                                      [[maybe_unused]] const ReadAll& read_all = nullptr) {
  constexpr bool staged = !std::is_same_v<Items, std::nullptr_t>;
  using X = std::remove_const_t<std::remove_pointer_t<decltype(f.x.data)>>;
  using Y = std::remove_pointer_t<decltype(f.y.data)>;
  using W = std::remove_pointer_t<decltype(f.weight.data)>;
  using B = std::remove_pointer_t<decltype(f.bias.data)>;
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<Y, X, W, B>;
  constexpr int items = Cached ? cached_items<V, cached_bytes<X>> : 1;
  const int n = int(f.x.length);
  const X* in = f.x.row(r);
  Y* out = f.y.row(r);
  auto load_x = [&](int c) { return load_columns<Contiguous, V>(in, c, n, f.x.column_stride); };

  S mean = 0, variance = 0;
  lanes<X, V> cache[items];
  if constexpr (Cached) {
    auto load_cached = [&](int k) {
      if constexpr (staged)
        cache[k] = staged_items(k);
      else
        cache[k] = load_x(Group::template column<V>(k));
    };
    if constexpr (Centered) {
      S sum = 0;
      FUSOR_UNROLL
      for (int k = 0; k < items; ++k) {
        load_cached(k);
        FUSOR_UNROLL
        for (int j = 0; j < V; ++j) sum += convert<S>(cache[k][j]);  // zero past the end
      }
      if constexpr (staged) read_all();
      mean = Group::all_reduce(sum, sum_op{}) / S(n);
    }
    S squares = 0;
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if constexpr (!Centered) load_cached(k);
      const int valid = valid_columns(c, n, V);
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) {
        const S d = convert<S>(cache[k][j]) - mean;
        if (j < valid) squares += d * d;
      }
    }
    if constexpr (staged && !Centered) read_all();
    variance = Group::all_reduce(squares, sum_op{}) / S(n);
  } else if constexpr (Centered) {
    mean_and_m2<S> stats{0, 0, 0};
    for_each_item_batched<Group, V>(n, load_x,
                                    [&](int c, const lanes<X, V>& v) { stats.add(v, valid_columns(c, n, V)); });
    stats = Group::all_reduce(stats, combine_mean_and_m2{});
    mean = stats.mean;
    variance = stats.m2 / S(n);
  } else {
    S squares = 0;
    for_each_item_batched<Group, V>(n, load_x, [&](int, const lanes<X, V>& v) {
      FUSOR_UNROLL
      for (int j = 0; j < V; ++j) squares += convert<S>(v[j]) * convert<S>(v[j]);  // zero past the end
    });
    variance = Group::all_reduce(squares, sum_op{}) / S(n);
  }
  const S rstd = S(1) / ::cuda::std::sqrt(variance + S(epsilon));

  // The columns' inputs: x, weight and (Centered) bias.
  struct item {
    lanes<X, V> x;
    lanes<std::remove_const_t<W>, V> w;
    lanes<std::remove_const_t<B>, V> b;
  };
  auto load_parameters = [&](int c, const lanes<X, V>& x) {
    item t{x, load_columns<Contiguous, V>(f.weight.data, c, n, f.weight.stride), {}};
    if constexpr (Centered) t.b = load_columns<Contiguous, V>(f.bias.data, c, n, f.bias.stride);
    return t;
  };
  auto write = [&](int c, const item& t) {
    lanes<S, V> result;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      if constexpr (Centered)
        result[j] = (convert<S>(t.x[j]) - mean) * rstd * convert<S>(t.w[j]) + convert<S>(t.b[j]);
      else
        result[j] = convert<S>(t.x[j]) * rstd * convert<S>(t.w[j]);
    }
    store_columns<Contiguous, V>(out, c, n, f.y.column_stride, result);
  };
  if constexpr (Cached) {
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if (c < n) write(c, load_parameters(c, cache[k]));
    }
  } else {
    for_each_item_batched<Group, V>(n, [&](int c) { return load_parameters(c, load_x(c)); }, write);
  }
  if (Group::lane() == 0) {
    if constexpr (Centered) f.mean[r] = convert<std::remove_pointer_t<decltype(f.mean.data)>>(mean);
    f.rstd[r] = convert<std::remove_pointer_t<decltype(f.rstd.data)>>(rstd);
  }
}

// The rows of this thread's group: the body of norm_forward_kernel.
template <class Group, bool Centered, class Y, class M, class R, class X, class W, class B>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_forward_rows(const norm_forward<Y, M, R, X, W, B>& f, float epsilon) {
  const bool fits = f.x.length <= Group::template capacity<vector_lanes<Y, X, W, B>, cached_bytes<X>>();
  const bool parameters_contiguous = f.weight.vector_ok() && (!Centered || f.bias.vector_ok());
  for (index_t r = Group::first_row(); r < f.x.rows; r += Group::row_step()) {
    const bool contiguous = parameters_contiguous && f.x.vector_row(f.x.row(r)) && f.y.vector_row(f.y.row(r));
    if (contiguous && fits)
      norm_forward_row<Group, Centered, true, true>(f, r, epsilon);
    else if (contiguous)
      norm_forward_row<Group, Centered, true, false>(f, r, epsilon);
    else
      norm_forward_row<Group, Centered, false, false>(f, r, epsilon);
  }
}

// Whether a norm forward of X has a staged kernel (staged_row): 16-bit inputs
// in 16-byte items.
template <class Y, class X, class W, class B>
inline constexpr bool norm_forward_stages = sizeof(X) == 2 && sizeof(lanes<X, vector_lanes<Y, X, W, B>>) == 16;
// Whether the staged kernel takes the rows of `f` in a launch of `shape`:
// stages_rows for x and y, and the weight and bias read 16 bytes at a time.
template <bool Centered, class Y, class M, class R, class X, class W, class B>
bool norm_forward_staged(const row_launch& shape, const norm_forward<Y, M, R, X, W, B>& f) {
  return stages_rows<vector_lanes<Y, X, W, B>, cached_bytes<X>>(shape, f.x, f.y) && f.weight.vector_ok() &&
         (!Centered || f.bias.vector_ok());
}

// norm_forward_rows where norm_forward_staged holds: the rows come through
// `stage` (staged_row's shared memory), each group's next row fetched while
// it reduces and writes one (for_each_staged_row). The body of the staged
// norm_forward_kernel.
template <class Group, bool Centered, class Y, class M, class R, class X, class W, class B>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_forward_staged_rows(const norm_forward<Y, M, R, X, W, B>& f, float epsilon,
                                                              unsigned char* stage) {
  static_assert(norm_forward_stages<Y, X, W, B>);
  constexpr int V = vector_lanes<Y, X, W, B>;
  for_each_staged_row<Group, V, cached_items<V, cached_bytes<X>>>(
      f.x.rows, int(f.x.length), stage,
      [&](index_t r, const auto& read_all, const auto& items) {
        norm_forward_row<Group, Centered, true, true>(f, r, epsilon, items, read_all);
      },
      staged_input<X>{f.x.data, f.x.offsets.single_step()});
}

#if FUSOR_HAS_CUDA
template <class Group, bool Centered, bool Staged, class Y, class M, class R, class X, class W, class B>
__global__ void __launch_bounds__(Group::max_block_threads, Group::min_blocks)
    norm_forward_kernel(const norm_forward<Y, M, R, X, W, B> f, const float epsilon) {
  extern __shared__ __align__(16) unsigned char staged_rows[];
  if constexpr (Staged)
    norm_forward_staged_rows<Group, Centered>(f, epsilon, staged_rows);
  else
    norm_forward_rows<Group, Centered>(f, epsilon);
}

template <bool Centered, class Y, class M, class R, class X, class W, class B>
void norm_forward_cuda(const norm_forward<Y, M, R, X, W, B>& f, float epsilon, const cuda_executor& ex) {
  gpu::require(Centered ? "layernorm on the cuda executor" : "rmsnorm on the cuda executor");
  if (f.x.rows == 0 || f.x.length == 0) return;
  with_row_group<device_simt, vector_lanes<Y, X, W, B>, cached_bytes<X>>(f.x.length, [&](auto group, row_launch shape) {
    using G = decltype(group);
    if constexpr (norm_forward_stages<Y, X, W, B>) {
      constexpr int V = vector_lanes<Y, X, W, B>;  // here, not outside the lambda: g++ 12 crashes on that
      using stage = staged_row<G, X, V, cached_items<V, cached_bytes<X>>>;
      if (launch_staged_rows<norm_forward_kernel<G, Centered, true, Y, M, R, X, W, B>>(
              shape, f.x.rows, norm_forward_staged<Centered>(shape, f), stage::bytes(shape.block_threads), ex.stream, f,
              epsilon))
        return;
    }
    launch_rows<norm_forward_kernel<G, Centered, false, Y, M, R, X, W, B>>(shape, f.x.rows, 0, ex.stream, f, epsilon);
  });
}

#endif  // FUSOR_HAS_CUDA

// ---- backward ------------------------------------------------------------------------------
// The accumulators' slots: accumulator_padded, accumulator_slot and
// accumulator_column (row_launch.hpp).

// dx of one row; with Accumulate, its terms are added into the group's
// accumulator row `acc` at the slots of the columns this thread owns, dbias's
// `padded` slots after dweight's (passed in: computed per element, its
// division was most of the row's instructions).
// A staged kernel gives a cached, contiguous row's items: x_items(k) and
// dy_items(k) are this thread's item k of x and dy, and read_all() is called
// once all are read; without them (null) the rows are loaded here.
template <class Group, bool Centered, bool Contiguous, bool Cached, bool Accumulate, class Bk, class S,
          class XItems = std::nullptr_t, class DYItems = std::nullptr_t, class ReadAll = std::nullptr_t>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_backward_row(const Bk& b, index_t r, S* acc, int padded,
                                                       [[maybe_unused]] const XItems& x_items = nullptr,
                                                       [[maybe_unused]] const DYItems& dy_items = nullptr,
                                                       [[maybe_unused]] const ReadAll& read_all = nullptr) {
  constexpr bool staged = !std::is_same_v<XItems, std::nullptr_t>;
  using Simt = typename Group::simt;
  using DX = std::remove_pointer_t<decltype(b.dx.data)>;
  using DY = std::remove_const_t<std::remove_pointer_t<decltype(b.dy.data)>>;
  using X = std::remove_const_t<std::remove_pointer_t<decltype(b.x.data)>>;
  using W = std::remove_const_t<std::remove_pointer_t<decltype(b.weight.data)>>;
  constexpr int V = vector_lanes<DX, DY, X, W>;
  constexpr int items = Cached ? cached_items<V, cached_bytes<X, DY>> : 1;
  const int n = int(b.x.length);
  const X* xr = b.x.row(r);
  const DY* gr = b.dy.row(r);
  DX* dxr = b.dx.row(r);
  const S mean = Centered ? convert<S>(b.mean[r]) : S(0), rstd = convert<S>(b.rstd[r]);
  // The columns' inputs: x, dy and weight.
  struct item {
    lanes<X, V> x;
    lanes<DY, V> dy;
    lanes<W, V> w;
  };
  auto load_x = [&](int c) { return load_columns<Contiguous, V>(xr, c, n, b.x.column_stride); };
  auto load_dy = [&](int c) { return load_columns<Contiguous, V>(gr, c, n, b.dy.column_stride); };
  auto load_w = [&](int c) { return load_columns<Contiguous, V>(b.weight.data, c, n, b.weight.stride); };
  auto load = [&](int c) { return item{load_x(c), load_dy(c), load_w(c)}; };
  // Columns past the row's end load as zeros (load_columns): their terms are
  // zero, so neither sum nor accumulator tests each column.
  auto sums_of = [&](const item& t) {
    two_sums<S> sums{0, 0};
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S g = convert<S>(t.dy[j]) * convert<S>(t.w[j]);
      sums = {sums.first + g, sums.second + g * (convert<S>(t.x[j]) - mean)};
    }
    return sums;
  };
  two_sums<S> sums{0, 0};
  lanes<X, V> xcache[items];
  lanes<DY, V> gcache[items];
  if constexpr (Cached) {
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if constexpr (staged) {
        xcache[k] = x_items(k);
        gcache[k] = dy_items(k);
      } else {
        xcache[k] = load_x(c);
        gcache[k] = load_dy(c);
      }
      sums = add_two_sums{}(sums, sums_of(item{xcache[k], gcache[k], load_w(c)}));
    }
    if constexpr (staged) read_all();
  } else {
    for_each_item_batched<Group, V>(n, load, [&](int, const item& t) { sums = add_two_sums{}(sums, sums_of(t)); });
  }
  sums = Group::all_reduce(sums, add_two_sums{});
  const S mean_g = Centered ? sums.first / S(n) : S(0), mean_gx = sums.second * rstd / S(n);

  // Called for this thread's item k (column c) where it starts inside the row
  // (c < n): its V slots are all inside the padded accumulator row.
  auto write = [&](int k, int c, const item& t) {
    lanes<S, V> result;
    S* const item_slots =
        Accumulate ? acc + accumulator_slot<V>(k, 0, Group::local_threads(), Group::local_lane()) : nullptr;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S xhat = (convert<S>(t.x[j]) - mean) * rstd, g = convert<S>(t.dy[j]);
      result[j] = rstd * (g * convert<S>(t.w[j]) - mean_g - xhat * mean_gx);
      if constexpr (Accumulate) {
        S* const weight_slot = item_slots + j * Group::local_threads();
        Simt::store_shared(weight_slot, Simt::load_shared(weight_slot) + g * xhat);
        if constexpr (Centered) {
          S* const bias_slot = weight_slot + padded;
          Simt::store_shared(bias_slot, Simt::load_shared(bias_slot) + g);
        }
      }
    }
    store_columns<Contiguous, V>(dxr, c, n, b.dx.column_stride, result);
  };
  if constexpr (Cached) {
    FUSOR_UNROLL
    for (int k = 0; k < items; ++k) {
      const int c = Group::template column<V>(k);
      if (c < n) write(k, c, item{xcache[k], gcache[k], load_w(c)});
    }
  } else {  // items in order, each once, those past the row's end (not called) last: k counts them
    int k = 0;
    for_each_item_batched<Group, V>(n, load, [&](int c, const item& t) { write(k++, c, t); });
  }
}

// Whether a norm backward of X and DY has a staged kernel (staged_row):
// 16-bit x and dy in 16-byte items.
template <class DX, class DY, class X, class W>
inline constexpr bool norm_backward_stages = sizeof(X) == 2 && sizeof(DY) == 2 &&
                                             sizeof(lanes<X, vector_lanes<DX, DY, X, W>>) == 16 &&
                                             sizeof(lanes<DY, vector_lanes<DX, DY, X, W>>) == 16;

// Whether the staged kernel takes the rows of `b` in a launch of `shape`:
// stages_rows for x, dy and dx, and the weight read 16 bytes at a time.
template <class DX, class DW, class DB, class DY, class X, class W, class M, class R>
bool norm_backward_staged(const row_launch& shape, const norm_backward<DX, DW, DB, DY, X, W, M, R>& b) {
  return stages_rows<vector_lanes<DX, DY, X, W>, cached_bytes<X, DY>>(shape, b.x, b.dy, b.dx) && b.weight.vector_ok();
}

// dx of every row of this thread's group: the body of norm_backward_kernel.
// With Accumulate, each group's accumulator row lives in the block's dynamic
// shared memory (`shared`; a cluster's, split among its blocks) and the
// block (the cluster) writes the sum of its groups' rows to `partials` (one
// row per block or cluster); without, dweight and dbias are left to
// norm_parameter_partials.
// Staged (norm_backward_staged holds; with Accumulate): the x and dy rows
// come through staged_row shared memory after the accumulators, each group's
// next rows fetched while it reduces and writes one (for_each_staged_row).
template <class Group, bool Centered, bool Accumulate, bool Staged = false, class DX, class DW, class DB, class DY,
          class X, class W, class M, class R>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_backward_rows(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b,
                                                        statistic_t<X>* partials, unsigned char* shared) {
  static_assert(!Staged || Accumulate);
  using Simt = typename Group::simt;
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<DX, DY, X, W>;
  const int n = int(b.x.length);
  const index_t padded = accumulator_padded<V>(n, Group::threads(), Group::local_threads());
  const index_t width = accumulator_row_width<V, Centered>(n, Group::threads(), Group::local_threads());
  S* const block_accumulators = reinterpret_cast<S*>(shared);
  S* const acc = Accumulate ? block_accumulators + Group::index() * width : nullptr;
  const int bias_slots = Accumulate ? int(padded) : 0;  // accumulators fit shared memory: int
  if constexpr (Accumulate) {  // each thread zeroes the slots it adds into: no barrier needed
    for (index_t slot = Group::local_lane(); slot < width; slot += Group::local_threads())
      Simt::store_shared(acc + slot, S(0));
  }

  if constexpr (Staged) {
    for_each_staged_row<Group, V, cached_items<V, cached_bytes<X, DY>>>(
        b.x.rows, n, shared + std::size_t(Group::per_block) * std::size_t(width) * sizeof(S),
        [&](index_t r, const auto& read_all, const auto& x_items, const auto& dy_items) {
          norm_backward_row<Group, Centered, true, true, true>(b, r, acc, bias_slots, x_items, dy_items, read_all);
        },
        staged_input<X>{b.x.data, b.x.offsets.single_step()}, staged_input<DY>{b.dy.data, b.dy.offsets.single_step()});
  } else {
    const bool fits = n <= Group::template capacity<V, cached_bytes<X, DY>>();
    for (index_t r = Group::first_row(); r < b.x.rows; r += Group::row_step()) {
      const bool contiguous = b.weight.vector_ok() && b.x.vector_row(b.x.row(r)) && b.dy.vector_row(b.dy.row(r)) &&
                              b.dx.vector_row(b.dx.row(r));
      if (contiguous && fits)
        norm_backward_row<Group, Centered, true, true, Accumulate>(b, r, acc, bias_slots);
      else if (contiguous)
        norm_backward_row<Group, Centered, true, false, Accumulate>(b, r, acc, bias_slots);
      else
        norm_backward_row<Group, Centered, false, false, Accumulate>(b, r, acc, bias_slots);
    }
  }
  if constexpr (Accumulate) {  // the groups' rows summed in order, by column: dweight, then dbias
    Simt::sync_block();
    const index_t partial_width = Centered ? 2 * index_t(n) : index_t(n);
    // One partial row a block, or a cluster (warps are never in clusters: no division for them).
    const index_t unit = Group::per_block > 1 ? Simt::block_x() : Simt::block_x() / Simt::cluster_blocks();
    S* const partial = partials + unit * partial_width;
    const int first_lane = Simt::cluster_rank() * Group::local_threads();  // this block's part of a cluster's row
    for (index_t slot = Simt::thread(); slot < width; slot += Simt::block_threads()) {
      const bool bias = slot >= padded;
      const index_t c =
          accumulator_column<V>(int(bias ? slot - padded : slot), Group::threads(), Group::local_threads(), first_lane);
      if (c >= n) continue;
      S total = 0;
      for (int g = 0; g < Group::per_block; ++g) total += Simt::load_shared(block_accumulators + g * width + slot);
      partial[(bias ? index_t(n) : 0) + c] = total;
    }
  }
}

// The column kernel of long rows: block (x, y) sums dy * xhat (dweight) and dy
// (dbias) over rows [y * rows_per_chunk, (y + 1) * rows_per_chunk) for
// V-column items x * parameter_threads + thread, into partial row y.
// Rows are loaded `parameter_rows_batch` at a time, so that several loads are
// in flight per thread. The body of norm_parameter_partials_kernel.
inline constexpr int parameter_threads = 256;
inline constexpr int parameter_rows_batch = 4;
template <class Simt, bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_parameter_partials(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b,
                                                             index_t rows_per_chunk, statistic_t<X>* partials) {
  using S = statistic_t<X>;
  using XV = std::remove_const_t<X>;
  using DYV = std::remove_const_t<DY>;
  constexpr int V = vector_lanes<DX, DY, X, W>;
  const int n = int(b.x.length);
  const index_t width = Centered ? 2 * index_t(n) : index_t(n);
  const index_t item = Simt::block_x() * parameter_threads + Simt::thread();
  if (item * V >= n) return;
  const int c = int(item * V);
  const index_t first = Simt::block_y() * rows_per_chunk;
  const index_t end = first + rows_per_chunk < b.x.rows ? first + rows_per_chunk : b.x.rows;
  S dweight[V] = {}, dbias[V] = {};
  // Uniform: every x and dy row 16-byte aligned at data + r * step, the
  // statistics at r * step; checked once, so that the batch's loads need no
  // per-row test or offset walk (which spilled the loaded rows to local memory).
  auto sum_rows = [&](auto uniform) {
    for (index_t r0 = first; r0 < end; r0 += parameter_rows_batch) {
      lanes<XV, V> x[parameter_rows_batch];
      lanes<DYV, V> dy[parameter_rows_batch];
      S mean[parameter_rows_batch], rstd[parameter_rows_batch];
      FUSOR_UNROLL
      for (int u = 0; u < parameter_rows_batch; ++u) {
        const index_t r = r0 + u < end ? r0 + u : end - 1;  // past the end: the last row again, not used
        if constexpr (decltype(uniform)::value) {
          x[u] = load_lanes<V, true>(b.x.data + r * b.x.offsets.single_step() + c);
          dy[u] = load_lanes<V, true>(b.dy.data + r * b.dy.offsets.single_step() + c);
          mean[u] = Centered ? convert<S>(b.mean.data[r * b.mean.offsets.single_step()]) : S(0);
          rstd[u] = convert<S>(b.rstd.data[r * b.rstd.offsets.single_step()]);
        } else {
          const X* xr = b.x.row(r);
          const DY* gr = b.dy.row(r);
          if (b.x.vector_row(xr) && b.dy.vector_row(gr)) {
            x[u] = load_columns<true, V>(xr, c, n, 1);
            dy[u] = load_columns<true, V>(gr, c, n, 1);
          } else {
            x[u] = load_columns<false, V>(xr, c, n, b.x.column_stride);
            dy[u] = load_columns<false, V>(gr, c, n, b.dy.column_stride);
          }
          mean[u] = Centered ? convert<S>(b.mean[r]) : S(0);
          rstd[u] = convert<S>(b.rstd[r]);
        }
      }
      FUSOR_UNROLL
      for (int u = 0; u < parameter_rows_batch; ++u) {
        if (r0 + u >= end) break;
        FUSOR_UNROLL
        for (int j = 0; j < V; ++j) {
          const S g = convert<S>(dy[u][j]);
          dweight[j] += g * ((convert<S>(x[u][j]) - mean[u]) * rstd[u]);
          if constexpr (Centered) dbias[j] += g;
        }
      }
    }
  };
  // Whole items only on the uniform path: a partial last item reads past the row.
  if (c + V <= n && b.x.uniform_vector_rows() && b.dy.uniform_vector_rows() && b.mean.offsets.single_axis() &&
      b.rstd.offsets.single_axis())
    sum_rows(std::true_type{});
  else
    sum_rows(std::false_type{});
  S* const partial = partials + Simt::block_y() * width;
  const int valid = valid_columns(c, n, V);
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j)
    if (j < valid) {
      partial[c + j] = dweight[j];
      if constexpr (Centered) partial[index_t(n) + c + j] = dbias[j];
    }
}

// dweight (and dbias) from `rows` partial rows. Block x takes columns
// [32 x, 32 x + 32), a warp-wide slice each of its warps: warp w sums partial
// rows w, w + sums_slices, ... of its 32 columns, then the slices are added in
// order. The order depends only on `rows`: deterministic. One thread per
// column summing every partial row in turn left the GPU idle (16 blocks of
// 256 threads for 4096 columns, each reading ~900 rows one after another).
// The body of norm_parameter_sums_kernel.
inline constexpr int sums_slices = 8;
template <class Simt, bool Centered, class DW, class DB, class S>
FUSOR_DEVICE FUSOR_FORCE_INLINE void norm_parameter_sums(const S* partials, int rows, index_t n,
                                                         const per_column<DW>& dweight, const per_column<DB>& dbias) {
  two_sums<S>* const slices = Simt::template shared_array<two_sums<S>, sums_slices * 32, two_sums<S>>();
  const int lane = Simt::thread() % 32, slice = Simt::thread() / 32;
  const index_t width = Centered ? 2 * n : n;
  for (index_t c0 = Simt::block_x() * 32; c0 < n; c0 += Simt::grid_x() * 32) {
    const index_t c = c0 + lane;
    two_sums<S> sums{0, 0};
    if (c < n) {
      for (int row = slice; row < rows; row += sums_slices) {
        sums.first += partials[row * width + c];
        if constexpr (Centered) sums.second += partials[row * width + n + c];
      }
    }
    Simt::store_shared(slices + slice * 32 + lane, sums);
    Simt::sync_block();
    if (slice == 0 && c < n) {
      for (int w = 1; w < sums_slices; ++w) sums = add_two_sums{}(sums, Simt::load_shared(slices + w * 32 + lane));
      dweight[c] = convert<DW>(sums.first);
      if constexpr (Centered) dbias[c] = convert<DB>(sums.second);
    }
    Simt::sync_block();  // slices is reused by the next columns
  }
}

// How layernorm backward is launched over `rows` rows of n in `shape` (plain
// arithmetic, shared by the CUDA launch and the emulated tests). Where a
// block's part of its groups' accumulator rows fits its shared memory
// (`shared_available` bytes beside its static storage), the row kernel
// accumulates dweight and dbias in partial_rows launch units (blocks, or
// clusters where the shape has them), one partial row each:
// resident(wanted, shared_bytes, staged) answers how many units the GPU holds
// at once (at most `wanted`, at least 1), or 0 where the kernel's clusters do
// not run on it. Otherwise the row kernel writes dx alone and the column
// kernel's (column_blocks x partial_rows) grid sums chunks of rows_per_chunk
// rows: chunks enough for four blocks a multiprocessor, each of at least
// parameter_rows_batch rows.
struct norm_backward_plan {
  bool accumulate = false;
  bool staged = false;           // the accumulating kernel stages its rows (norm_backward_staged)
  std::size_t shared_bytes = 0;  // the accumulating row kernel's dynamic shared memory a block
  int partial_rows = 0;          // with accumulate: the row kernel's blocks (clusters)
  index_t column_blocks = 0, rows_per_chunk = 0;  // the column kernel's, without accumulate
};
template <class Group, int V, bool Centered, class S, class Resident>
norm_backward_plan plan_norm_backward(index_t rows, index_t n, const row_launch& shape, std::size_t shared_available,
                                      int multiprocessors, const Resident& resident, std::size_t staging_bytes = 0) {
  norm_backward_plan plan;
  const index_t row_width = accumulator_row_width<V, Centered>(n, shape.group_threads(), shape.local_threads());
  const std::size_t shared_bytes = std::size_t(Group::per_block) * std::size_t(row_width) * sizeof(S);
  if (shared_bytes <= shared_available) {
    // Staged where the rows fit beside the accumulators; else, or where the staged kernel's clusters do not
    // run, the accumulating kernel alone.
    for (const bool staged : {staging_bytes > 0 && shared_bytes + staging_bytes <= shared_available, false}) {
      const std::size_t bytes = shared_bytes + (staged ? staging_bytes : 0);
      if (const int units = resident((rows + Group::per_block - 1) / Group::per_block, bytes, staged); units > 0) {
        plan.accumulate = true;
        plan.staged = staged;
        plan.shared_bytes = bytes;
        plan.partial_rows = units;
        return plan;
      }
      if (!staged) break;
    }
  }
  plan.column_blocks = (n + index_t(parameter_threads) * V - 1) / (index_t(parameter_threads) * V);
  const index_t wanted_blocks = 4 * index_t(multiprocessors);
  const index_t chunks_wanted = std::clamp<index_t>((wanted_blocks + plan.column_blocks - 1) / plan.column_blocks, 1,
                                                    (rows + parameter_rows_batch - 1) / parameter_rows_batch);
  plan.rows_per_chunk = (rows + chunks_wanted - 1) / chunks_wanted;
  plan.partial_rows = int((rows + plan.rows_per_chunk - 1) / plan.rows_per_chunk);
  return plan;
}

#if FUSOR_HAS_CUDA
template <class Group, bool Centered, bool Accumulate, bool Staged, class DX, class DW, class DB, class DY, class X,
          class W, class M, class R>
__global__ void __launch_bounds__(Group::max_block_threads, Group::min_blocks)
    norm_backward_kernel(const norm_backward<DX, DW, DB, DY, X, W, M, R> b, statistic_t<X>* partials) {
  extern __shared__ __align__(16) unsigned char shared_accumulators[];
  norm_backward_rows<Group, Centered, Accumulate, Staged>(b, partials, shared_accumulators);
}

template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
__global__ void __launch_bounds__(parameter_threads, 2)
    norm_parameter_partials_kernel(const norm_backward<DX, DW, DB, DY, X, W, M, R> b, index_t rows_per_chunk,
                                   statistic_t<X>* partials) {
  norm_parameter_partials<device_simt, Centered>(b, rows_per_chunk, partials);
}

template <bool Centered, class DW, class DB, class S>
__global__ void __launch_bounds__(32 * sums_slices)
    norm_parameter_sums_kernel(const S* partials, int rows, index_t n, per_column<DW> dweight, per_column<DB> dbias) {
  norm_parameter_sums<device_simt, Centered>(partials, rows, n, dweight, dbias);
}

// Launches norm_parameter_sums_kernel over n columns.
template <bool Centered, class DW, class DB, class S>
void launch_parameter_sums(const S* partials, int rows, index_t n, const per_column<DW>& dweight,
                           const per_column<DB>& dbias, cudaStream_t stream) {
  const int grid = int(std::clamp<index_t>((n + 31) / 32, 1, max_row_blocks));
  launch_kernel<norm_parameter_sums_kernel<Centered, DW, DB, S>>(grid, 32 * sums_slices, 0, stream, partials, rows,
                                                                 n, dweight, dbias);
}

template <class Group, bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward_launch(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b, const row_launch& shape,
                          const cuda_executor& ex) {
  using S = statistic_t<X>;
  constexpr int V = vector_lanes<DX, DY, X, W>;
  constexpr auto accumulating = norm_backward_kernel<Group, Centered, true, false, DX, DW, DB, DY, X, W, M, R>;
  constexpr auto rows_only = norm_backward_kernel<Group, Centered, false, false, DX, DW, DB, DY, X, W, M, R>;
  constexpr bool stages = norm_backward_stages<DX, DY, X, W>;
  // The staged kernel where the rows allow it (else the accumulating one, never launched).
  constexpr auto staged_kernel = norm_backward_kernel<Group, Centered, true, stages, DX, DW, DB, DY, X, W, M, R>;
  const index_t n = b.x.length;
  const index_t width = Centered ? 2 * n : n;  // a partial row

  int device = 0, shared_limit = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // The static part counts: 49,152 bytes of accumulators beside the reductions' static storage
  // failed to launch when only the accumulators were weighed (rows of 4097 fp32, H200).
  const std::size_t static_bytes = gpu::static_shared_bytes(accumulating);
  const std::size_t shared_available = std::size_t(shared_limit) > static_bytes ? shared_limit - static_bytes : 0;
  // Staging (the x and dy rows through shared memory, after the accumulators) where the kernel's code may
  // copy asynchronously (sm_80 or newer) and staging is on.
  std::size_t staging_bytes = 0;
  if constexpr (stages)
    if (row_staging().load(std::memory_order_relaxed) && norm_backward_staged(shape, b) &&
        stages_on_this_device<staged_kernel>())
      staging_bytes = 2 * staged_row<Group, X, V, cached_items<V, cached_bytes<X, DY>>>::bytes(shape.block_threads);
  const norm_backward_plan plan = plan_norm_backward<Group, V, Centered, S>(
      b.x.rows, n, shape, shared_available, gpu::multiprocessor_count(),
      [&](index_t wanted, std::size_t shared_bytes, bool staged) {
        // Before the occupancy query: the kernel that will run, with the bytes it will ask for.
        const index_t blocks = staged ? (gpu::allow_dynamic_shared(staged_kernel, shared_bytes, static_bytes),
                                         resident_row_blocks<staged_kernel>(shape, shared_bytes))
                                      : (gpu::allow_dynamic_shared(accumulating, shared_bytes, static_bytes),
                                         resident_row_blocks<accumulating>(shape, shared_bytes));
        const index_t units = blocks / shape.cluster_blocks;  // 0: the clusters do not run here
        return units == 0 ? 0
                          : int(std::clamp<index_t>(std::min(wanted, units), 1, max_row_blocks / shape.cluster_blocks));
      },
      staging_bytes);
  buffer<device_space> partials(std::size_t(plan.partial_rows) * std::size_t(width) * sizeof(S), ex.stream);
  const int grid = plan.partial_rows * shape.cluster_blocks;  // with accumulate
  if (plan.accumulate && plan.staged) {
    launch_in_shape<staged_kernel>(shape, grid, plan.shared_bytes, ex.stream, b, partials.as<S>());
    gpu::staged_launch_counter().fetch_add(1);
  } else if (plan.accumulate) {
    launch_in_shape<accumulating>(shape, grid, plan.shared_bytes, ex.stream, b, partials.as<S>());
  } else {
    launch_rows<rows_only>(shape, b.x.rows, 0, ex.stream, b, static_cast<S*>(nullptr));
    launch_kernel<norm_parameter_partials_kernel<Centered, DX, DW, DB, DY, X, W, M, R>>(
        dim3{unsigned(plan.column_blocks), unsigned(plan.partial_rows)}, parameter_threads, 0, ex.stream, b,
        plan.rows_per_chunk, partials.as<S>());
  }
  launch_parameter_sums<Centered>(partials.as<S>(), plan.partial_rows, n, b.dweight, b.dbias, ex.stream);
}

template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward_cuda(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b, const cuda_executor& ex) {
  gpu::require(Centered ? "layernorm_backward on the cuda executor" : "rmsnorm_backward on the cuda executor");
  if (b.x.length == 0) return;
  if (b.x.rows == 0) {  // no rows: the parameter gradients are zero
    launch_parameter_sums<Centered>(static_cast<const statistic_t<X>*>(nullptr), 0, b.x.length, b.dweight, b.dbias,
                                    ex.stream);
    return;
  }
  with_row_group<device_simt, vector_lanes<DX, DY, X, W>, cached_bytes<X, DY>>(
      b.x.length, [&](auto group, row_launch shape) { norm_backward_launch<decltype(group), Centered>(b, shape, ex); });
}

#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
