// fusor/optim/state_layout.hpp — which of a parameter group's elements an
// optimizer's state holds, and where: what a sharded checkpoint
// (parallel/distributed_checkpoint.hpp) needs to save each parameter's moments
// and master weights under the parameter's name, whatever the trainer.
//
// A plain trainer's optimizer holds the whole group, element for element (one
// span, [0, size) at 0). Under ZeRO-1 (parallel::data_parallel) each rank holds
// its chunk of every bucket, packed: one span per bucket, and `sharded` says
// that the ranks of the data group hold different spans.
#pragma once

#include <vector>

#include "fusor/core/extents.hpp"

namespace fusor::optim {

/// One run of a parameter group's elements held in an optimizer's state.
struct state_span {
  /// The first of the group's elements [begin, end) that the span holds.
  index_t begin = 0, end = 0;  ///< one past the last of the group's elements [begin, end)
  index_t at = 0;              ///< where element `begin` lies in the optimizer's state (the rest follow it)
};

/// Which of a parameter group's elements an optimizer's state holds, and where.
struct state_layout {
  /// The runs of the group's elements that the state holds, one per ZeRO bucket (or one for the whole group).
  std::vector<state_span> spans;
  bool sharded = false;  ///< true: each data-parallel rank holds its own spans (ZeRO); false: every rank all of them

  /// The layout of an optimizer that holds the whole group of `size` elements: [0, size) at 0, not sharded.
  static state_layout whole(index_t size) { return {{{0, size, 0}}, false}; }
};

}  // namespace fusor::optim
