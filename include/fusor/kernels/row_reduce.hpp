// fusor/kernels/row_reduce.hpp — the building blocks of the row-wise CUDA
// kernels: a row handled by a warp (short rows), a block, or on sm_90 a
// cluster of blocks (long rows); reductions over that group (shuffles, then
// across warps and the cluster's blocks) whose result every thread of the
// group receives; a row cached in registers; and reads and writes of V
// consecutive columns that are 16-byte vector accesses where the row allows.
// The groups are written against a Simt policy (warp_mma.hpp), so the kernels
// built on them run on the host under the SIMT emulator too; the launches
// (CUDA only) are at the end.
//
// Thread `lane` of a group owns columns (k * threads + lane) * V + [0, V) for
// k = 0, 1, ...; a row of at most threads * cached_row_elements elements is
// read once into registers and written from there (one pass over memory),
// longer rows are read twice (statistics, then outputs). A row that starts
// between 16-byte boundaries is cached through the aligned window around it
// (softmax, its backward, cross-entropy: "rows that start between 16-byte
// boundaries" below), whose columns the threads own in the same way. Column ownership is
// the same in both cases, which the parameter-gradient accumulators of the
// normalisation backward passes rely on. Reductions use a fixed tree for a
// given group size, so results are deterministic run to run.
#pragma once

#include "fusor/config.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda/std/cmath>
#include <cuda/std/tuple>

#include "fusor/core/vector_access.hpp"
#include "fusor/kernels/row_launch.hpp"
#include "fusor/kernels/rows.hpp"
#include "fusor/kernels/simt_reduce.hpp"
#include "fusor/kernels/warp_mma.hpp"

#if FUSOR_HAS_CUDA
#include <cuda_runtime.h>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/launch_shape.hpp"
#endif

namespace fusor::detail {

// Bytes of loads a thread issues before using them when a row is read in a
// loop, so that several 16-byte loads are in flight per thread (8 registers;
// more spill under the 64-register cap).
inline constexpr int looped_batch_bytes = 32;

// ---- groups ------------------------------------------------------------------------------
// A group of threads handles one row at a time. Thread lane() of threads()
// owns columns (k threads() + lane()) V + [0, V) for k = 0, 1, ...; the
// same columns on every row, which the normalisation backward passes'
// parameter-gradient accumulators rely on. all_reduce's tree is fixed for a
// given group size: results are deterministic run to run. Written against a
// Simt policy (warp_mma.hpp): device_simt on the GPU, the emulator's on the
// host (simt_emulator.hpp), so the host tests run the row kernels' CUDA code.

// A warp per row, eight rows a block.
template <class Simt>
struct warp_row_group {
  using simt = Simt;
  static constexpr int block_threads = warp_rows_block_threads;
  static constexpr int per_block = block_threads / 32;
  // Launch bounds: 64 registers a thread at most, so 32 warps fit on a multiprocessor.
  static constexpr int max_block_threads = block_threads;
  static constexpr int min_blocks = 1024 / block_threads;

  FUSOR_DEVICE static constexpr int threads() { return 32; }
  FUSOR_DEVICE static int lane() { return Simt::thread() % 32; }
  FUSOR_DEVICE static int index() { return Simt::thread() / 32; }
  // The group's threads in this block, and this thread's index among them.
  FUSOR_DEVICE static constexpr int local_threads() { return 32; }
  FUSOR_DEVICE static int local_lane() { return lane(); }
  FUSOR_DEVICE static index_t first_row() { return Simt::block_x() * per_block + index(); }
  FUSOR_DEVICE static index_t row_step() { return Simt::grid_x() * per_block; }
  template <int V>
  FUSOR_DEVICE static int column(int k) { return (k * 32 + lane()) * V; }
  template <int V, int ElementBytes>
  FUSOR_DEVICE static constexpr index_t capacity() { return group_capacity<V, ElementBytes>(32); }

  // The reduction of `value` over the warp, in every thread of it.
  template <class T, class Op>
  FUSOR_DEVICE static T all_reduce(const T& value, Op op) {
    return warp_all_reduce<Simt>(value, op);
  }
};

// A block per row, or on sm_90 a cluster of blocks per row: its size is read
// at run time (the block's threads, a power of two from 64 to 1024, and the
// cluster's block count), so one kernel serves every block size (each size a
// template once cost nvcc a kernel apiece).
template <class Simt>
struct block_row_group {
  using simt = Simt;
  static constexpr int per_block = 1;
  static constexpr int max_block_threads = 1024;
  static constexpr int min_blocks = 1;  // with 1024 threads: 64 registers a thread

  FUSOR_DEVICE static int threads() { return Simt::block_threads() * Simt::cluster_blocks(); }
  FUSOR_DEVICE static int lane() { return Simt::cluster_rank() * Simt::block_threads() + Simt::thread(); }
  FUSOR_DEVICE static int index() { return 0; }
  // The group's threads in this block (a cluster's blocks hold a part each), and this thread's index among them.
  FUSOR_DEVICE static int local_threads() { return Simt::block_threads(); }
  FUSOR_DEVICE static int local_lane() { return Simt::thread(); }
  FUSOR_DEVICE static index_t first_row() { return Simt::block_x() / Simt::cluster_blocks(); }
  FUSOR_DEVICE static index_t row_step() { return Simt::grid_x() / Simt::cluster_blocks(); }
  template <int V>
  FUSOR_DEVICE static int column(int k) { return (k * threads() + lane()) * V; }
  template <int V, int ElementBytes>
  FUSOR_DEVICE static index_t capacity() { return group_capacity<V, ElementBytes>(threads()); }

  // The reduction of `value` over the block (the cluster), in every thread of
  // it. Every thread of the block (the cluster) must call it. The block's
  // result comes from block_all_reduce (simt_reduce.hpp); then every thread
  // folds the cluster's blocks' results in rank order.
  template <class T, class Op>
  FUSOR_DEVICE static T all_reduce(const T& value, Op op) {
    const T out = block_all_reduce<Simt, block_row_group>(value, op);
    if (const int blocks = Simt::cluster_blocks(); blocks > 1) {
      T* const slot = Simt::template shared_array<T, 1, block_row_group>();
      if (Simt::thread() == 0) Simt::store_shared(slot, out);
      Simt::cluster_sync();  // every block's result written
      // Lane r reads block r's result (one remote load a thread, all in
      // flight together); every thread folds them in rank order by shuffles.
      const int lane = Simt::thread() % 32;
      const T block_r = Simt::load_cluster_shared(slot, lane < blocks ? lane : 0);
      T total = Simt::shfl(block_r, 0);
      for (int rank = 1; rank < blocks; ++rank) total = op(total, Simt::shfl(block_r, rank));
      Simt::cluster_sync();  // every block has read the slots: they may be written again, or the block exit
      return total;
    }
    return out;
  }
};

// ---- reductions ----------------------------------------------------------------------
struct sum_op {
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T operator()(const T& a, const T& b) const { return a + b; }
};
// fmax: a NaN is passed over here; the kernels let it reach a sum instead.
struct max_op {
  template <class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T operator()(const T& a, const T& b) const { return ::cuda::std::fmax(a, b); }
};

// exp(x) in a row kernel. Fast: for results stored in 16 bits only, the
// multi-function unit's ex2.approx.ftz of x log2(e): two instructions where
// the accurate expf takes ten, which bound bf16 softmax rows by arithmetic.
// Its relative error, about 2^-22 plus |x| 2^-24 (x <= 0 here, a shift by
// the row's max), stays far below a bf16 or fp16 store's rounding (2^-9,
// 2^-12); results under 2^-126 become 0 (also beneath what 16 bits keep
// apart from 0 in the sums). Results stored in fp32 or fp64 keep the accurate exp.
template <bool Fast, class S>
FUSOR_DEVICE FUSOR_FORCE_INLINE S row_exp(S x) {
  if constexpr (Fast && std::is_same_v<S, float>) {
#if FUSOR_DEVICE_PASS
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
#else
    return std::exp2(x * 1.4426950408889634f);  // the emulator's (simt_emulator.hpp)
#endif
  } else {
    return ::cuda::std::exp(x);
  }
}

// Whether every type is 16 bits wide (bf16, fp16): results a fast exp serves.
template <class... T>
inline constexpr bool all_16_bit = ((sizeof(T) == 2) && ...);

// Running max and sum of exp(x - max): softmax statistics in one read of a row.
// A NaN element makes the sum NaN; an all -inf row gives sum NaN (exp(-inf - -inf)),
// as the two-pass formula does.
// FastExp: row_exp's fast form (results stored in 16 bits).
template <class S, bool FastExp = false>
struct max_and_sum {
  S max;
  S sum;
  FUSOR_DEVICE FUSOR_FORCE_INLINE static S rescale(S from, S to) {
    return from == to ? S(1) : row_exp<FastExp>(from - to);  // == also covers -inf -> -inf
  }
  template <int V, class T>
  FUSOR_DEVICE FUSOR_FORCE_INLINE void add(const lanes<T, V>& v, int valid) {
    S m = max;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) m = ::cuda::std::fmax(m, convert<S>(v[j]));
    S s = sum * rescale(max, m);
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) s += row_exp<FastExp>(convert<S>(v[j]) - m);
    max = m;
    sum = s;
  }
};
struct combine_max_and_sum {
  template <class S, bool FastExp>
  FUSOR_DEVICE FUSOR_FORCE_INLINE max_and_sum<S, FastExp> operator()(const max_and_sum<S, FastExp>& a,
                                                                   const max_and_sum<S, FastExp>& b) const {
    using stats = max_and_sum<S, FastExp>;
    const S m = ::cuda::std::fmax(a.max, b.max);
    return {m, a.sum * stats::rescale(a.max, m) + b.sum * stats::rescale(b.max, m)};
  }
};

// Chan et al.'s combination of two states of a running mean and sum of
// squared deviations: one division.
template <class S>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void combine_moments(S& count, S& mean, S& m2, S b_count, S b_mean, S b_m2) {
  const S n = count + b_count;
  const S delta = b_mean - mean;
  const S b_share = b_count / n;
  mean += delta * b_share;
  m2 += b_m2 + delta * delta * count * b_share;
  count = n;
}
// Welford's running mean and sum of squared deviations, for rows read twice.
template <class S>
struct mean_and_m2 {
  S count;
  S mean;
  S m2;
  // The item's first `valid` lanes: their own mean and squared deviations
  // (two passes over registers), combined into the state in one step. One
  // division an item, where Welford's update element by element took one
  // an element.
  template <int V, class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void add(const lanes<T, V>& v, int valid) {
    if (valid <= 0) return;
    S sum = 0;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j)
      if (j < valid) sum += convert<S>(v[j]);
    const S item_mean = valid == V ? sum * (S(1) / S(V)) : sum / S(valid);
    S item_m2 = 0;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) {
      const S d = convert<S>(v[j]) - item_mean;
      if (j < valid) item_m2 += d * d;
    }
    if (count == S(0)) {
      count = S(valid), mean = item_mean, m2 = item_m2;
      return;
    }
    combine_moments(count, mean, m2, S(valid), item_mean, item_m2);
  }
};
// The combination of two mean_and_m2 states (a group's all_reduce).
struct combine_mean_and_m2 {
  template <class S>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE mean_and_m2<S> operator()(mean_and_m2<S> a, const mean_and_m2<S>& b) const {
    if (a.count == S(0)) return b;
    if (b.count == S(0)) return a;
    combine_moments(a.count, a.mean, a.m2, b.count, b.mean, b.m2);
    return a;
  }
};

// ---- columns ---------------------------------------------------------------------------
// Columns within a row are int: rows are shorter than 2^31 (checked on the host).
// How many of the V columns from c are inside a row of `length`.
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int valid_columns(int c, int length, int V) {
  const int left = length - c;
  return left <= 0 ? 0 : (left >= V ? V : left);
}

// Columns [c, c + V) of a row; columns past the end read as zero. Contiguous:
// the row has unit stride and a 16-byte-aligned start, and V columns inside it
// move as 16-byte vectors. Otherwise one element access per column.
template <bool Contiguous, int V, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE lanes<std::remove_const_t<T>, V> load_columns(T* row, int c, int length,
                                                                            index_t stride) {
  using E = std::remove_const_t<T>;
  if constexpr (Contiguous) {
    if (c + V <= length) return load_lanes<V, true>(row + c);
  }
  lanes<E, V> out;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j)
    out[j] = c + j < length ? row[Contiguous ? index_t(c + j) : index_t(c + j) * stride] : convert<E>(0.0f);
  return out;
}

// Columns [c, c + V) of an expression's row (expression_rows::reader).
template <bool Contiguous, int V, class Reader>
FUSOR_DEVICE FUSOR_FORCE_INLINE lanes<row_value_t<Reader>, V> load_columns(const Reader& row, int c, int length,
                                                                          index_t) {
  using E = row_value_t<Reader>;
  lanes<E, V> out;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) out[j] = c + j < length ? row[c + j] : E(0);
  return out;
}

template <bool Contiguous, int V, class T, class Value>
FUSOR_DEVICE FUSOR_FORCE_INLINE void store_columns(T* row, int c, int length, index_t stride,
                                                 const lanes<Value, V>& values) {
  lanes<T, V> raw;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) raw[j] = convert<T>(values[j]);
  if constexpr (Contiguous) {
    if (c + V <= length) {
      store_lanes<V, true>(row + c, raw);
      return;
    }
  }
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j)
    if (c + j < length) row[Contiguous ? index_t(c + j) : index_t(c + j) * stride] = raw[j];
}

// ---- rows that start between 16-byte boundaries ------------------------------------
// A contiguous row whose start lies `first` elements past a 16-byte boundary
// (a row of 50257 bf16 logits: row r starts r elements past one, modulo 8)
// is held in the items of the aligned window around it: window column c is
// row column c - first, so the row's own columns are [first, first + n), and
// thread `lane` owns window columns as it owns a row's columns. Items wholly
// inside the row move as 16-byte vectors; the partial items at its two ends,
// element by element: nothing outside the row is read or written (in place,
// the row before is another group's). Such a row is cached, read once, as
// aligned rows are, where its window (n + first columns) fits the group.

// Elements by which a row lies past the 16-byte boundary before it: the
// shift of the window its operands' rows share, taken from the first of
// `rows` with the smallest elements (whose V-element items are 16 bytes;
// the others' must then line up, shares_window).
template <class T, class... U>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int window_first(const T* row, [[maybe_unused]] const U*... others) {
  if constexpr (((sizeof(T) <= sizeof(U)) && ...))
    return int(reinterpret_cast<std::uintptr_t>(row) % 16 / sizeof(T));
  else
    return window_first(others...);
}
// Whether `row` of `m` moves through a window whose column 0 lies `first`
// elements before it: unit stride, and that column on a 16-byte boundary
// (every item of V columns, a multiple of 16 bytes, then starts on one).
template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE bool shares_window(const row_matrix<T>& m, T* row, int first) {
  return m.column_stride == 1 && (reinterpret_cast<std::uintptr_t>(row) - std::uintptr_t(first) * sizeof(T)) % 16 == 0;
}
#if !FUSOR_HAS_CUDA
// Rows cached through a window off a 16-byte boundary (first > 0), counted
// where the kernels' bodies run on the host: under the SIMT emulator, in the
// host tests, which check with it that such rows take that path.
inline std::atomic<long>& shifted_window_rows() {
  static std::atomic<long> rows{0};
  return rows;
}
#endif
// Counts a row of Group cached through a window `first` elements off a
// boundary, once (lane 0), on the host; nothing on a GPU.
template <class Group>
FUSOR_DEVICE FUSOR_FORCE_INLINE void count_shifted_window_row([[maybe_unused]] int first) {
#if !FUSOR_HAS_CUDA
  if (first != 0 && Group::lane() == 0) shifted_window_rows().fetch_add(1, std::memory_order_relaxed);
#endif
}

// Window columns [c, c + V) of the row starting at `row`, `first` elements
// past a 16-byte boundary, whose columns end at window column `end`; columns
// outside the row read as `outside` (-inf for a maximum and a sum of exp,
// 0 for a sum).
template <int V, class T>
FUSOR_DEVICE FUSOR_FORCE_INLINE lanes<std::remove_const_t<T>, V> load_window(T* row, int c, int first, int end,
                                                                             float outside) {
  using E = std::remove_const_t<T>;
  if (c >= first && c + V <= end) return load_lanes<V, true>(row + (c - first));
  lanes<E, V> out;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) out[j] = c + j >= first && c + j < end ? row[c + j - first] : convert<E>(outside);
  return out;
}
template <int V, class T, class Value>
FUSOR_DEVICE FUSOR_FORCE_INLINE void store_window(T* row, int c, int first, int end, const lanes<Value, V>& values) {
  lanes<T, V> raw;
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j) raw[j] = convert<T>(values[j]);
  if (c >= first && c + V <= end) {
    store_lanes<V, true>(row + (c - first), raw);
    return;
  }
  FUSOR_UNROLL
  for (int j = 0; j < V; ++j)
    if (c + j >= first && c + j < end) row[c + j - first] = raw[j];
}

// Calls use(c, load(c)) for each item of V columns this thread owns in a row
// of n, loading up to looped_batch_bytes of items before using them: a row
// read in a loop would otherwise keep one load in flight per thread. Loads
// past the end read zeros and are not used. Each thread uses only the columns
// it loaded, so an output may be its input (in place).
template <class Group, int V, class Load, class Use>
FUSOR_DEVICE FUSOR_FORCE_INLINE void for_each_item_batched(int n, const Load& load, const Use& use) {
  const int step = Group::threads() * V;
  using item = decltype(load(0));
  constexpr int batch = sizeof(item) >= looped_batch_bytes ? 1 : int(looped_batch_bytes / sizeof(item));
  // c < max_row_length + batch * step: no int overflow (rows.hpp).
  for (int c0 = Group::template column<V>(0); c0 < n; c0 += batch * step) {
    item items[batch];
    FUSOR_UNROLL
    for (int u = 0; u < batch; ++u) items[u] = load(c0 + u * step);
    FUSOR_UNROLL
    for (int u = 0; u < batch; ++u)
      if (c0 + u * step < n) use(c0 + u * step, items[u]);
  }
}

// ---- the next row, staged in shared memory -------------------------------------------------
// A group caches 32 elements of its row a thread: 64 bytes of 16-bit rows,
// half of an fp32 row's 128, and the bytes in flight stop while the group
// reduces and writes. bf16 rows reached 0.55-0.75x of the copy bandwidth where
// fp32 rows reached 0.93-0.97x (H200, 2026-11-27). A staged kernel runs fewer
// groups than rows (one wave: staged_row_grid), and its rows travel through
// shared memory by cp.async (copy_async_16: no register held while in
// flight): once a group has read its row's items into registers, it starts
// copying its next row, which lands while this one is reduced and written.
// Each thread copies and reads only its own items, so nothing needs a
// barrier. Rows must be whole 16-byte items (length a multiple of V) with
// 16-byte-aligned starts: items past the end land as zeros.
template <class Group, class X, int V, int Items>
struct staged_row {
  using simt = typename Group::simt;
  using item_type = lanes<X, V>;
  static_assert(sizeof(item_type) == 16, "fusor: a staged row moves 16-byte items");
  item_type* slots;  // this thread's item k: slots[k * Group::local_threads()]

  // Bytes of dynamic shared memory a block of `block_threads` threads stages.
  FUSOR_HOST_DEVICE static constexpr std::size_t bytes(int block_threads) {
    return std::size_t(block_threads) * Items * sizeof(item_type);
  }

  // A group's threads stage their items in their own block (a cluster's
  // blocks each stage their own threads' items).
  FUSOR_DEVICE explicit staged_row(unsigned char* shared) {
    const int local = Group::local_threads();
    slots = reinterpret_cast<item_type*>(shared) + Group::index() * Items * local + Group::local_lane();
  }
  // Starts copying this thread's items of `row` (n columns, a multiple of V)
  // over the slots; this thread's reads of them come first in the code (the
  // compiler barrier), and its copies land at wait().
  FUSOR_DEVICE void fetch(const X* row, int n) {
    simt::compiler_barrier();
    FUSOR_UNROLL
    for (int k = 0; k < Items; ++k) {
      const int c = Group::template column<V>(k);
      simt::copy_async_16_or_zero(slots + k * Group::local_threads(), c < n ? row + c : row, c < n);
    }
    simt::commit_async();
  }
  // Waits until the row fetched last has landed.
  FUSOR_DEVICE void wait() const { simt::wait_async(); }
  // This thread's item k of that row.
  FUSOR_DEVICE item_type item(int k) const { return simt::load_shared(slots + k * Group::local_threads()); }
};

// An input of a staged kernel: row r starts at data + r * step.
template <class X>
struct staged_input {
  const X* data;
  index_t step;
};

// The rows of a staged kernel's group: `row(r, read_all, items...)` for
// each, where items(k) (one for each input, in order) is this thread's item k
// of the input's row r, from shared memory, and read_all() must follow the
// last items() call (it starts fetching the group's next row). Each input
// stages its rows in its own staged_row::bytes of `shared`, one after another.
template <class Group, int V, int Items, class Row, class... X>
FUSOR_DEVICE FUSOR_FORCE_INLINE void for_each_staged_row(index_t rows, int n, unsigned char* shared, const Row& row,
                                                         const staged_input<X>&... inputs) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    using first_input = std::tuple_element_t<0, std::tuple<X...>>;  // every input's items are 16 bytes
    const std::size_t input_bytes = staged_row<Group, first_input, V, Items>::bytes(Group::simt::block_threads());
    ::cuda::std::tuple<staged_row<Group, X, V, Items>...> stages{
        staged_row<Group, X, V, Items>(shared + I * input_bytes)...};
    auto fetch = [&](index_t r) { (::cuda::std::get<I>(stages).fetch(inputs.data + r * inputs.step, n), ...); };
    const index_t first = Group::first_row();
    if (first < rows) fetch(first);
    for (index_t r = first; r < rows; r += Group::row_step()) {
      ::cuda::std::get<0>(stages).wait();  // every copy of this thread
      const index_t after = r + Group::row_step();
      row(
          r,
          [&] {
            if (after < rows) fetch(after);
          },
          [&](int k) { return ::cuda::std::get<I>(stages).item(k); }...);
    }
  }
  (std::index_sequence_for<X...>{});
}

// Whether a staged kernel stages the rows of `matrices` (row_matrix, the
// same length) for a launch of `shape`: the rows are cached (not a block
// reading them twice) and whole items of V columns, and each matrix's rows
// lie at one step from a 16-byte-aligned start, 16-byte aligned all
// (row_matrix::uniform_vector_rows): the kernel tests nothing per row.
template <int V, int ElementBytes, class First, class... Others>
bool stages_rows(const row_launch& shape, const First& first, const Others&... others) {
  return first.length % V == 0 && first.length <= group_capacity<V, ElementBytes>(shape.group_threads()) &&
         first.uniform_vector_rows() && (others.uniform_vector_rows() && ...);
}

// The grid of a staged launch over `rows`: at most `resident` blocks (one
// wave: a group takes its next row only after its current one), whole
// clusters. 0 where that grid is no smaller than one block a group of rows
// (row_grid): no group would take a second row, and the plain kernel serves.
constexpr int staged_row_grid(const row_launch& shape, index_t rows, index_t resident) {
  const int plain = row_grid(shape, rows);
  const index_t wave = resident / shape.cluster_blocks * shape.cluster_blocks;
  return wave >= shape.cluster_blocks && wave < plain ? int(wave) : 0;
}

// launch(Group{}, shape) with the group and launch shape row_launch_for
// chooses for rows of `length` (row_launch.hpp): a warp_row_group, or a
// block_row_group for a block or a cluster, on Simt's threads.
template <class Simt, int V, int ElementBytes, class Launch>
void with_row_group(index_t length, const Launch& launch) {
  const row_launch shape = row_launch_for<V, ElementBytes>(length);
  if (shape.rows_per_block > 1)
    launch(warp_row_group<Simt>{}, shape);
  else
    launch(block_row_group<Simt>{}, shape);
}

#if FUSOR_HAS_CUDA
// ---- launches ---------------------------------------------------------------------------
// The groups on the GPU's own threads.
using warp_rows = warp_row_group<device_simt>;
using block_rows = block_row_group<device_simt>;

// One launch of Kernel, checked and counted.
template <auto Kernel, class... Args>
void launch_kernel(dim3 grid, int block, std::size_t shared_bytes, cudaStream_t stream, const Args&... args) {
  Kernel<<<grid, block, shared_bytes, stream>>>(args...);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}

// Kernel's launch in `grid` blocks (a multiple of the cluster size) in
// clusters of `shape`; `cluster` is the attribute the configuration points to.
inline cudaLaunchConfig_t cluster_launch_config(const row_launch& shape, int grid, std::size_t shared_bytes,
                                                cudaStream_t stream, cudaLaunchAttribute& cluster) {
  cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = unsigned(shape.cluster_blocks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(unsigned(grid));
  config.blockDim = dim3(unsigned(shape.block_threads));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  return config;
}

// Clusters of Kernel in `shape` (up to max_cluster_blocks blocks), each
// block with `shared_bytes` of dynamic shared memory, that the current device
// holds at once; 0 where none runs: Kernel's code for this device is older
// than sm_90 (or JIT-compiled from older PTX), the GPU refuses a cluster past
// the portable size, or no such cluster fits it (a MIG slice may hold fewer
// multiprocessors than the cluster needs). Cached per device, shape and
// bytes. Past 48 KB of shared memory, Kernel must be allowed its bytes first
// (gpu::allow_dynamic_shared).
template <auto Kernel>
int resident_clusters(const row_launch& shape, std::size_t shared_bytes) {
  static keyed_cache<std::tuple<int, int, int, std::size_t>, int> known;
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  return known.get({device, shape.block_threads, shape.cluster_blocks, shared_bytes}, [&] {
    // Past eight blocks the kernel must allow a non-portable size; a GPU that cannot refuses here.
    const bool allowed = shape.cluster_blocks <= portable_cluster_blocks ||
                         cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    if (!allowed) gpu::forget_reported_error();
    if (!allowed || !gpu::code_version_at_least(Kernel, 90)) return 0;
    cudaLaunchAttribute attribute;
    const cudaLaunchConfig_t config = cluster_launch_config(shape, shape.cluster_blocks, shared_bytes, 0, attribute);
    // An error (a cluster size the device refuses, as drivers may answer
    // instead of 0) means none: the blocks' fallback is always right, and a
    // broken device reports itself at the launch that follows.
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, Kernel, &config) != cudaSuccess) {
      gpu::forget_reported_error();
      return 0;
    }
    return clusters;
  });
}

// Blocks of Kernel launched in `shape` (clusters where it has them) with
// `shared_bytes` of dynamic shared memory a block that the current device
// holds at once: one wave; 0 where its clusters do not run here.
template <auto Kernel>
index_t resident_row_blocks(const row_launch& shape, std::size_t shared_bytes) {
  if (shape.cluster_blocks > 1) return index_t(resident_clusters<Kernel>(shape, shared_bytes)) * shape.cluster_blocks;
  return gpu::resident_blocks<Kernel>(shape.block_threads, shared_bytes);
}

// Kernel in `grid` blocks in clusters of `shape` (resident_clusters says it runs there).
template <auto Kernel, class... Args>
void launch_in_clusters(const row_launch& shape, int grid, std::size_t shared_bytes, cudaStream_t stream,
                        const Args&... args) {
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = cluster_launch_config(shape, grid, shared_bytes, stream, cluster);
  FUSOR_CUDA_CHECK(cudaLaunchKernelEx(&config, Kernel, args...));
  gpu::launch_counter().fetch_add(1);
  gpu::cluster_launch_counter().fetch_add(1);
}

// Kernel in `grid` blocks of `shape`, in its clusters where it has them
// (resident_row_blocks says they run here).
template <auto Kernel, class... Args>
void launch_in_shape(const row_launch& shape, int grid, std::size_t shared_bytes, cudaStream_t stream,
                     const Args&... args) {
  if (shape.cluster_blocks > 1)
    launch_in_clusters<Kernel>(shape, grid, shared_bytes, stream, args...);
  else
    launch_kernel<Kernel>(grid, shape.block_threads, shared_bytes, stream, args...);
}

// Kernel over `rows` in the shape with_row_group chose; in clusters where the
// shape asks for them and the GPU runs Kernel's clusters (resident_clusters),
// else in 512-thread blocks (the kernel then reads long rows twice). Staged
// kernels (`wave` not 0) in at most `wave` blocks (staged_row_grid), and
// never in the fallback: their rows must fit the group; false where the
// launch would have needed it, and nothing launched.
template <auto Kernel, class... Args>
bool launch_rows_in_wave(row_launch shape, index_t rows, index_t wave, std::size_t shared_bytes, cudaStream_t stream,
                         const Args&... args) {
  auto grid = [&](const row_launch& s) {
    const int plain = row_grid(s, rows);
    return wave > 0 ? std::max(staged_row_grid(s, rows, wave), s.cluster_blocks) : plain;
  };
  if (shape.cluster_blocks > 1) {
    if (resident_clusters<Kernel>(shape, shared_bytes) > 0) {
      launch_in_clusters<Kernel>(shape, grid(shape), shared_bytes, stream, args...);
      return true;
    }
    if (wave > 0) return false;
    shape = block_row_launch;
  }
  launch_kernel<Kernel>(grid(shape), shape.block_threads, shared_bytes, stream, args...);
  return true;
}
template <auto Kernel, class... Args>
void launch_rows(row_launch shape, index_t rows, std::size_t shared_bytes, cudaStream_t stream, const Args&... args) {
  launch_rows_in_wave<Kernel>(shape, rows, 0, shared_bytes, stream, args...);
}

// Whether row kernels stage their next row where they can (staged_row). On
// by default; a benchmark turns it off to time both kernels in one run.
inline std::atomic<bool>& row_staging() {
  static std::atomic<bool> on{true};
  return on;
}

// Whether the staged Kernel may run on the current device: its code copies
// asynchronously (sm_80 or newer). Asked once a device, which then also lets
// Kernel take all the shared memory the device allows a block (the limit for
// a launch; occupancy follows the bytes each launch asks for).
template <auto Kernel>
bool stages_on_this_device() {
  static per_device_cache<bool> known;
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  return known.get(device, [device] {
    if (!gpu::code_version_at_least(Kernel, 80)) return false;
    int most = 0;
    FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const std::size_t static_bytes = gpu::static_shared_bytes(Kernel);
    if (std::size_t(most) > static_bytes) gpu::allow_dynamic_shared(Kernel, most - static_bytes, static_bytes);
    return true;
  });
}

// Launches the staged Kernel over `rows` and returns true; or returns false,
// having launched nothing, where the plain kernel should run: staging is off,
// the rows are not staged (`staged`: stages_rows), Kernel's code for this GPU
// predates sm_80 (cp.async), one wave of blocks would give no group a second
// row, or the shape's clusters cannot run here.
template <auto Kernel, class... Args>
bool launch_staged_rows(const row_launch& shape, index_t rows, bool staged, std::size_t shared_bytes,
                        cudaStream_t stream, const Args&... args) {
  if (!staged || !row_staging().load(std::memory_order_relaxed) || !stages_on_this_device<Kernel>()) return false;
  const index_t wave = resident_row_blocks<Kernel>(shape, shared_bytes);
  if (staged_row_grid(shape, rows, wave) == 0) return false;
  if (!launch_rows_in_wave<Kernel>(shape, rows, wave, shared_bytes, stream, args...)) return false;
  gpu::staged_launch_counter().fetch_add(1);
  return true;
}

#endif  // FUSOR_HAS_CUDA

}  // namespace fusor::detail
