// fusor/exec/launch_shape.hpp — the CUDA executor's launch arithmetic, kept
// free of CUDA so the host tests check it: the launch policy, the grid, block
// and items per thread for a given amount of work (any index_t, past 2^31
// included). The occupancy API's suggestions it starts from are kept per
// device (core/value_cache.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/value_cache.hpp"

namespace fusor {

/// How the cuda executor shapes its launches; zeros let it choose.
struct launch_policy {
  int block_size = 0;        ///< Threads per block; 0: the occupancy API's choice.
  int items_per_thread = 0;  ///< Vector steps per thread; 0: enough to fill the GPU a few times over.
};

namespace detail {

// gridDim.x's limit on every GPU CUDA 13 supports.
inline constexpr index_t max_grid_blocks = std::numeric_limits<int>::max();

// cudaOccupancyMaxPotentialBlockSize's answer for one kernel on one device.
struct occupancy_suggestion {
  int min_grid = 0;  // blocks that fill the device once
  int block = 0;     // threads per block
};

struct launch_shape {
  int grid, block, items;
};

constexpr index_t ceil_div(index_t a, index_t b) { return a / b + (a % b != 0); }

// `work` steps (>= 1) as a grid of blocks of threads, each thread taking
// `items` steps. Without a policy: a few waves of resident blocks, each thread
// looping over the rest. The grid never exceeds max_grid_blocks: where the
// policy's items per thread would need more blocks, each thread takes more.
inline launch_shape plan_launch(const launch_policy& policy, index_t work, occupancy_suggestion suggested) {
  work = std::max<index_t>(work, 1);
  const index_t block = policy.block_size > 0 ? policy.block_size : std::max(suggested.block, 1);
  const index_t blocks_needed = ceil_div(work, block);
  constexpr index_t max_items = std::numeric_limits<int>::max();
  index_t items = policy.items_per_thread;
  if (items <= 0) {
    const index_t waves = index_t(std::max(suggested.min_grid, 1)) * 8;
    items = std::min(ceil_div(blocks_needed, std::min(waves, max_grid_blocks)), max_items);
  }
  items = std::max(items, ceil_div(blocks_needed, max_grid_blocks));
  if (items > max_items)
    throw error("fusor: the cuda executor cannot launch " + std::to_string(work) + " steps in blocks of " +
                std::to_string(block) + " threads: a thread would take more than 2^31 - 1 steps; use a larger "
                "launch_policy::block_size");
  return {int(ceil_div(blocks_needed, items)), int(block), int(items)};
}

}  // namespace detail
}  // namespace fusor
