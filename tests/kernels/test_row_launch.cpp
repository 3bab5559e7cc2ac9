// The CUDA row-wise kernels' shapes, checked on the host (row_launch.hpp):
// the group chosen for each row length (the smallest that holds the row in
// registers, clusters of 512-thread blocks up to sixteen, then a block that
// reads twice), grids that are whole clusters within the grid limit, and
// layernorm backward's accumulator slots: every column of a row has one slot
// of its own thread, and the slot leads back to the column; and its plan.
#include <algorithm>
#include <cstddef>
#include <tuple>
#include <utility>
#include <vector>

#include <fusor/kernels/layernorm_cuda.hpp>
#include <fusor/kernels/row_launch.hpp>

#include "support/fusor_test.hpp"

using namespace fusor;
using detail::row_launch;

namespace {

// fp32 softmax: 4 columns an item, 4 bytes each (32 elements a thread).
constexpr auto fp32_rows = &detail::row_launch_for<4, 4>;
// bf16 softmax backward: 8 columns an item, y and dy counted 4 bytes each (16 elements a thread).
constexpr auto two_cached_bf16_rows = &detail::row_launch_for<8, 8>;

void check_shape(const row_launch& got, const row_launch& want, index_t length) {
  INFO("length ", length);
  CHECK(got.block_threads == want.block_threads);
  CHECK(got.cluster_blocks == want.cluster_blocks);
  CHECK(got.rows_per_block == want.rows_per_block);
}

}  // namespace

FUSOR_TEST_CASE("row-wise launch: the smallest group that holds the row, then clusters, then a block reading twice") {
  // Each length against the group just big enough: a warp holds 1024 fp32 elements, a block 32 a thread.
  check_shape(fp32_rows(1), {256, 1, 8}, 1);
  check_shape(fp32_rows(1024), {256, 1, 8}, 1024);
  check_shape(fp32_rows(1025), {64, 1, 1}, 1025);
  check_shape(fp32_rows(2048), {64, 1, 1}, 2048);
  check_shape(fp32_rows(2049), {128, 1, 1}, 2049);
  check_shape(fp32_rows(4096), {128, 1, 1}, 4096);
  check_shape(fp32_rows(8192), {256, 1, 1}, 8192);
  check_shape(fp32_rows(16384), {512, 1, 1}, 16384);
  check_shape(fp32_rows(32768), {1024, 1, 1}, 32768);
  check_shape(fp32_rows(32769), {512, 3, 1}, 32769);
  check_shape(fp32_rows(50304), {512, 4, 1}, 50304);
  check_shape(fp32_rows(131072), {512, 8, 1}, 131072);  // the portable cluster's most
  check_shape(fp32_rows(131073), {512, 9, 1}, 131073);
  check_shape(fp32_rows(200003), {512, 13, 1}, 200003);
  check_shape(fp32_rows(262144), {512, 16, 1}, 262144);
  check_shape(fp32_rows(262145), {512, 1, 1}, 262145);
  // Two cached rows: half the elements a thread.
  check_shape(two_cached_bf16_rows(512), {256, 1, 8}, 512);
  check_shape(two_cached_bf16_rows(513), {64, 1, 1}, 513);
  check_shape(two_cached_bf16_rows(16384), {1024, 1, 1}, 16384);
  check_shape(two_cached_bf16_rows(16385), {512, 3, 1}, 16385);
  check_shape(two_cached_bf16_rows(50304), {512, 7, 1}, 50304);
  check_shape(two_cached_bf16_rows(65537), {512, 9, 1}, 65537);
  check_shape(two_cached_bf16_rows(131072), {512, 16, 1}, 131072);
  check_shape(two_cached_bf16_rows(131073), {512, 1, 1}, 131073);
  // Every length: the group holds the row when it can, and no smaller group would.
  auto held = [](int threads) { return detail::group_capacity<4, 4>(threads); };
  for (index_t n = 1; n <= 270000; n += 97) {
    const row_launch shape = fp32_rows(n);
    INFO("length ", n);
    if (shape.cluster_blocks == 1 && shape.block_threads == 512 && n > held(512)) {
      CHECK(n > held(512 * detail::max_cluster_blocks));  // read twice: no cluster holds it
      continue;
    }
    CHECK(n <= held(shape.group_threads()));
    // The next smaller choice would not hold it: half the block, or a cluster of one block fewer.
    if (shape.rows_per_block == 1)
      CHECK(n > held(shape.cluster_blocks > 1 ? 512 * (shape.cluster_blocks - 1) : shape.block_threads / 2));
  }
}

FUSOR_TEST_CASE("row-wise launch: grids of whole groups and clusters, within the grid limit") {
  CHECK(detail::row_grid({256, 1, 8}, 17) == 3);  // eight rows a block
  CHECK(detail::row_grid({128, 1, 1}, 16384) == 16384);
  CHECK(detail::row_grid({512, 4, 1}, 1334) == 1334 * 4);
  CHECK(detail::row_grid({512, 3, 1}, 1) == 3);
  CHECK(detail::row_grid({128, 1, 1}, 0) == 1);
  // Past the limit: the largest multiple of the cluster size within it.
  CHECK(detail::row_grid({128, 1, 1}, index_t(1) << 40) == detail::max_row_blocks);
  for (int blocks = 2; blocks <= detail::max_cluster_blocks; ++blocks) {
    const int grid = detail::row_grid({512, blocks, 1}, index_t(1) << 40);
    INFO("cluster of ", blocks);
    CHECK(grid % blocks == 0);
    CHECK(grid <= detail::max_row_blocks);
    CHECK(grid > detail::max_row_blocks - blocks);
  }
  CHECK(row_launch{256, 1, 8}.group_threads() == 32);
  CHECK(row_launch{512, 7, 1}.group_threads() == 3584);
}

namespace {

// Every column [0, n) of a group of `threads` whose blocks hold `local` of
// them each (a cluster: threads / local blocks), V columns an item: owned by
// lane (c / V) % threads of block lane / local, its slot in that block's
// accumulators below padded and its own (slots congruent to its local lane),
// no slot of a block shared, and the slot's column is the column.
template <int V>
void check_slots(int threads, int local, index_t n) {
  const int blocks = threads / local;
  const index_t padded = detail::accumulator_padded<V>(n, threads, local);
  INFO("threads ", threads, " in blocks of ", local, ", V ", V, ", n ", n, ", padded ", padded);
  CHECK(padded * blocks >= n);
  CHECK(padded % (index_t(local) * V) == 0);
  CHECK(padded * blocks - n < index_t(threads) * V);
  CHECK(detail::accumulator_row_width<V, false>(n, threads, local) == padded);    // rmsnorm: dweight's slots
  CHECK(detail::accumulator_row_width<V, true>(n, threads, local) == 2 * padded);  // layernorm: and dbias's
  std::vector<std::vector<int>> column_of(std::size_t(blocks), std::vector<int>(std::size_t(padded), -1));
  int wrong = 0;
  for (int lane = 0; lane < threads; ++lane) {
    const int block = lane / local, local_lane = lane % local;
    auto& columns = column_of[std::size_t(block)];
    int k = 0;
    for (int c = lane * V; c < padded * blocks; c += threads * V, ++k)  // item k: column (k threads + lane) V
      for (int j = 0; j < V; ++j) {
        const int slot = detail::accumulator_slot<V>(k, j, local, local_lane);
        const bool ok = slot >= 0 && slot < padded && slot % local == local_lane &&
                        columns[std::size_t(slot)] == -1 &&
                        detail::accumulator_column<V>(slot, threads, local, block * local) == c + j;
        if (!ok && wrong++ == 0) FAIL_CHECK("column " << c + j << " of lane " << lane << ": slot " << slot);
        if (slot >= 0 && slot < padded) columns[std::size_t(slot)] = c + j;
      }
  }
  CHECK(wrong == 0);
  for (int block = 0; block < blocks; ++block)
    for (index_t s = 0; s < padded; ++s)
      CHECK_MESSAGE(column_of[std::size_t(block)][std::size_t(s)] >= 0, "block ", block, "'s slot ", s, " of no column");
}

template <int V>
void check_slots(int threads, index_t n) {
  check_slots<V>(threads, threads, n);
}

}  // namespace

FUSOR_TEST_CASE("layernorm backward's accumulator slots: one a column, its own thread's, leading back") {
  for (int threads = 32; threads <= 1024; threads *= 2)
    for (const index_t n : {index_t(1), index_t(31), index_t(768), index_t(4097)}) {
      check_slots<1>(threads, n);
      check_slots<2>(threads, n);
      check_slots<4>(threads, n);
      check_slots<8>(threads, n);
    }
  // Clusters of two to sixteen 512-thread blocks, each keeping its own threads' columns.
  for (int blocks = 2; blocks <= detail::max_cluster_blocks; ++blocks)
    for (const index_t n : {index_t(1), index_t(16385), index_t(50304), index_t(65536)}) {
      check_slots<4>(512 * blocks, 512, n);
      check_slots<8>(512 * blocks, 512, n);
    }
}

namespace {
// The groups' rows a block, as plan_norm_backward reads them.
struct warps {
  static constexpr int per_block = 8;
};
struct block {
  static constexpr int per_block = 1;
};
}  // namespace

// plan_norm_backward (layernorm_cuda.hpp): accumulators in shared memory where
// a block's groups' rows fit, in as many blocks as the GPU holds at once (at
// most one a group of rows); otherwise the column kernel's chunks: whole
// rows, at least parameter_rows_batch each, covering every row once, enough
// for four blocks a multiprocessor where the rows allow.
FUSOR_TEST_CASE("layernorm backward's plan: accumulate where the rows fit shared memory, else chunks of rows") {
  const auto resident = [](index_t wanted, std::size_t, bool) { return int(std::min<index_t>(wanted, 264)); };
  const std::size_t h200 = (std::size_t(227) << 10) - 1024;  // opt-in shared memory beside 1 KiB of static
  // fp32 rows of 768 a warp: 8 accumulator rows of 2 x 768 floats (48 KiB) a block.
  auto p = detail::plan_norm_backward<warps, 4, true, float>(1000, 768, detail::row_launch_for<4, 8>(768), h200, 132,
                                                            resident);
  CHECK(p.accumulate);
  CHECK(p.shared_bytes == 8 * 2 * 768 * sizeof(float));
  CHECK(p.partial_rows == 125);  // 1000 rows, 8 a block: fewer blocks than the GPU holds
  // rmsnorm: no bias slots, half the bytes.
  p = detail::plan_norm_backward<warps, 4, false, float>(1000, 768, detail::row_launch_for<4, 8>(768), h200, 132,
                                                         resident);
  CHECK(p.shared_bytes == 8 * 768 * sizeof(float));
  // 4096 fp32 columns in a 512-thread block: 2 x 4096 floats; 100000 rows, the GPU's 264 blocks.
  p = detail::plan_norm_backward<block, 4, true, float>(100000, 4096, detail::row_launch_for<4, 8>(4096), h200, 132,
                                                        resident);
  CHECK(p.accumulate);
  CHECK(p.partial_rows == 264);
  // Too little shared memory (rows of 200003: a 512-thread block's 1.6 MB): the column kernel's chunks.
  for (const auto& [rows, n, available] :
       {std::tuple{index_t(100000), index_t(4096), std::size_t(1024)},
        std::tuple{index_t(3), index_t(4096), std::size_t(0)}, std::tuple{index_t(5000), index_t(200003), h200}}) {
    INFO("rows ", rows, ", length ", n);
    const row_launch shape = detail::row_launch_for<4, 8>(n);
    p = detail::plan_norm_backward<block, 4, true, float>(rows, n, shape, available, 132, resident);
    CHECK_FALSE(p.accumulate);
    CHECK(p.shared_bytes == 0);
    CHECK(p.column_blocks == (n + 1023) / 1024);  // 256 threads of 4 columns a block
    CHECK((p.rows_per_chunk >= detail::parameter_rows_batch || p.rows_per_chunk == rows));
    CHECK(index_t(p.partial_rows) * p.rows_per_chunk >= rows);
    CHECK(index_t(p.partial_rows - 1) * p.rows_per_chunk < rows);  // no empty chunk
    CHECK(p.column_blocks * p.partial_rows < 4 * 132 + 2 * p.column_blocks);  // four a multiprocessor, rounded up
  }
  CHECK(detail::row_launch_for<4, 8>(200003).cluster_blocks == 1);  // the last case: a block reading rows twice
}

// A cluster's blocks each keep the accumulators of their own threads'
// columns: a seventh of a 50304-column row's each, in as many clusters as the
// GPU holds at once; where its clusters do not run (resident 0), the column
// kernel's chunks.
FUSOR_TEST_CASE("layernorm backward's plan: a cluster's blocks accumulate their part of the row") {
  const row_launch shape = detail::row_launch_for<4, 8>(50304);  // fp32 x and dy, 16 columns of each a thread
  REQUIRE(shape.cluster_blocks == 7);
  const std::size_t h200 = (std::size_t(227) << 10) - 1024;
  std::vector<index_t> wanted;
  const auto resident = [&](index_t units, std::size_t, bool) {
    wanted.push_back(units);
    return int(std::min<index_t>(units, 37));
  };
  // 50304 columns over 3584 threads, 4 columns an item: 4 items a thread, 4 x 512 x 4 columns a block.
  auto p = detail::plan_norm_backward<block, 4, true, float>(5000, 50304, shape, h200, 132, resident);
  CHECK(p.accumulate);
  CHECK(p.shared_bytes == 2 * 8192 * sizeof(float));
  CHECK(p.partial_rows == 37);
  p = detail::plan_norm_backward<block, 4, false, float>(20, 50304, shape, h200, 132, resident);  // rmsnorm
  CHECK(p.accumulate);
  CHECK(p.shared_bytes == 8192 * sizeof(float));
  CHECK(p.partial_rows == 20);  // a cluster a row
  CHECK(wanted == std::vector<index_t>{5000, 20});
  p = detail::plan_norm_backward<block, 4, true, float>(5000, 50304, shape, h200, 132,
                                                        [](index_t, std::size_t, bool) { return 0; });
  CHECK_FALSE(p.accumulate);
  CHECK(p.shared_bytes == 0);
  CHECK(p.column_blocks == (50304 + 1023) / 1024);
  CHECK(index_t(p.partial_rows) * p.rows_per_chunk >= 5000);
}

// A staged kernel's rows (bf16 x and dy) take shared memory after the
// accumulators: staged where both fit, else the accumulating kernel alone;
// the occupancy is asked for the kernel and the bytes that will run.
FUSOR_TEST_CASE("layernorm backward's plan: the staged rows beside the accumulators where both fit") {
  const row_launch shape = detail::row_launch_for<8, 8>(4096);  // bf16 x and dy: a 256-thread block
  const std::size_t accumulators = 2 * 4096 * sizeof(float), staging = 2 * 256 * 2 * 16;
  std::vector<std::pair<std::size_t, bool>> asked;
  const auto resident = [&](index_t wanted, std::size_t bytes, bool staged) {
    asked.emplace_back(bytes, staged);
    return int(std::min<index_t>(wanted, 264));
  };
  auto p = detail::plan_norm_backward<block, 8, true, float>(16384, 4096, shape, std::size_t(227) << 10, 132, resident,
                                                             staging);
  CHECK(p.accumulate);
  CHECK(p.staged);
  CHECK(p.shared_bytes == accumulators + staging);
  CHECK(p.partial_rows == 264);
  // Room for the accumulators only: not staged.
  p = detail::plan_norm_backward<block, 8, true, float>(16384, 4096, shape, accumulators + staging - 1, 132, resident,
                                                        staging);
  CHECK(p.accumulate);
  CHECK_FALSE(p.staged);
  CHECK(p.shared_bytes == accumulators);
  // No staging asked for (rows the staged kernel does not take).
  p = detail::plan_norm_backward<block, 8, true, float>(16384, 4096, shape, std::size_t(227) << 10, 132, resident);
  CHECK_FALSE(p.staged);
  CHECK(p.shared_bytes == accumulators);
  REQUIRE(asked.size() == 3);
  CHECK(asked[0] == std::pair{accumulators + staging, true});
  CHECK(asked[1] == std::pair{accumulators, false});
  CHECK(asked[2] == std::pair{accumulators, false});
  // The staged kernel not running (its clusters refused): the accumulating kernel alone, asked next.
  asked.clear();
  p = detail::plan_norm_backward<block, 8, true, float>(
      16384, 4096, shape, std::size_t(227) << 10, 132,
      [&](index_t wanted, std::size_t bytes, bool staged) { return staged ? 0 : resident(wanted, bytes, staged); },
      staging);
  CHECK(p.accumulate);
  CHECK_FALSE(p.staged);
  CHECK(p.shared_bytes == accumulators);
  CHECK(asked == std::vector<std::pair<std::size_t, bool>>{{accumulators, false}});
}
