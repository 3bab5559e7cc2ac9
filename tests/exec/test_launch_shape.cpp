// The cuda executor's launch arithmetic (fusor/exec/launch_shape.hpp), on the
// host: every shape covers its work, stays within gridDim.x's limit of
// 2^31 - 1 blocks for work past 2^31 (and far past), honours a launch policy
// where it can.
#include <doctest/doctest.h>

#include <fusor/exec/launch_shape.hpp>

using fusor::index_t;
using fusor::launch_policy;
using fusor::detail::launch_shape;
using fusor::detail::max_grid_blocks;
using fusor::detail::occupancy_suggestion;
using fusor::detail::plan_launch;

namespace {

constexpr occupancy_suggestion h100_like{132 * 2, 768};

// The shape covers `work` steps, no block is idle, and it fits a launch.
void check_covers(const launch_shape& s, index_t work) {
  INFO("work ", work, ": grid ", s.grid, ", block ", s.block, ", items ", s.items);
  CHECK(s.grid >= 1);
  CHECK(s.block >= 1);
  CHECK(s.items >= 1);
  CHECK(index_t(s.grid) <= max_grid_blocks);
  const index_t per_block = index_t(s.block) * s.items;
  CHECK(index_t(s.grid) * per_block >= work);
  CHECK(index_t(s.grid - 1) * per_block < std::max<index_t>(work, 1));
}

const index_t large_works[] = {1,
                               7,
                               768,
                               769,
                               (index_t(1) << 31) - 1,
                               index_t(1) << 31,
                               (index_t(1) << 31) + 7,
                               (index_t(1) << 33) + 3,
                               index_t(1) << 40,
                               (index_t(1) << 50) + 1};

}  // namespace

TEST_CASE("launch shape: the occupancy default covers any work in a few waves") {
  for (const index_t work : large_works) {
    const launch_shape s = plan_launch({}, work, h100_like);
    check_covers(s, work);
    CHECK(s.block == h100_like.block);
    CHECK(s.grid <= h100_like.min_grid * 8);
  }
  // No work is one step: a launch of one block.
  const launch_shape none = plan_launch({}, 0, h100_like);
  CHECK(none.grid == 1);
  CHECK(none.items == 1);
}

TEST_CASE("launch shape: a launch policy is kept while the grid fits") {
  const launch_shape s = plan_launch({128, 4}, 1000000, h100_like);
  CHECK(s.block == 128);
  CHECK(s.items == 4);
  check_covers(s, 1000000);
  // Items from the policy, block from the occupancy API, and the reverse.
  CHECK(plan_launch({0, 3}, 5000, h100_like).items == 3);
  CHECK(plan_launch({0, 3}, 5000, h100_like).block == h100_like.block);
  CHECK(plan_launch({64, 0}, 5000, h100_like).block == 64);
}

TEST_CASE("launch shape: past 2^31 - 1 blocks a thread takes more items, never a larger grid") {
  // One thread per block and one item: 2^31 + 7 blocks would be asked for.
  const index_t work = (index_t(1) << 31) + 7;
  const launch_shape s = plan_launch({1, 1}, work, h100_like);
  check_covers(s, work);
  CHECK(s.block == 1);
  CHECK(s.items == 2);
  for (const index_t w : large_works) {
    check_covers(plan_launch({1, 1}, w, h100_like), w);
    check_covers(plan_launch({32, 1}, w, h100_like), w);
    check_covers(plan_launch({1024, 1}, w, h100_like), w);
  }
}

TEST_CASE("launch shape: more items than an int holds is refused with a clear error") {
  const index_t work = index_t(1) << 62;
  try {
    (void)plan_launch({1, 1}, work, h100_like);
    FAIL("no exception was thrown");
  } catch (const fusor::error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find(std::to_string(work)) != std::string::npos);
    CHECK(message.find("block_size") != std::string::npos);
  }
  // A block of 1024 threads covers the same work.
  check_covers(plan_launch({1024, 0}, work, h100_like), work);
}

