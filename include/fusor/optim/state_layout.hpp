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

struct state_span {
  index_t begin = 0, end = 0;  // the group's elements [begin, end)
  index_t at = 0;              // lie in the optimizer's state from here
};

struct state_layout {
  std::vector<state_span> spans;
  bool sharded = false;  // true: each data-parallel rank holds its own spans (ZeRO); false: every rank all of them

  static state_layout whole(index_t size) { return {{{0, size, 0}}, false}; }
};

}  // namespace fusor::optim
