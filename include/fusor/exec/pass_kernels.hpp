// fusor/exec/pass_kernels.hpp — what the CUDA executor's kernels do with a
// pass (exec/cuda.hpp wraps these bodies in __global__ kernels and launches
// them), written against a Simt policy (kernels/warp_mma.hpp) so that the
// host tests run them under the SIMT emulator: every expression node's vector
// loads and stores, the tail, and the steps each thread takes are checked
// without a GPU (the host executor itself walks one element at a time).
//
// Three bodies: linear (vector access at linear positions, for 16-byte
// aligned pointers or any), rows (vector access along the innermost axis,
// each step finding its multi-index once: broadcast operands; compiled only
// for passes whose operand types show a broadcast), and strided (one element
// a step, by multi-index). dispatch_pass picks one for a pass's
// plan and says over how many steps it is launched.
#pragma once

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/exec/pass.hpp"

namespace fusor::detail {

// A linear pass in steps of V elements (Aligned: every pointer 16-byte
// aligned). Thread t of block b takes steps (b items + k) threads + t for
// k < items, so a warp's accesses are contiguous; block 0 then takes the last
// size % V elements one at a time.
template <int V, bool Aligned>
struct linear_pass_body {
  template <class Simt, class Pass>
  FUSOR_DEVICE FUSOR_FORCE_INLINE static void run(const Pass& p, int items_per_thread) {
    const index_t threads = unsigned(Simt::block_threads());  // unsigned: no sign extension
    const index_t steps = p.size / V;
    const index_t first = Simt::block_x() * items_per_thread * threads + unsigned(Simt::thread());
    for (int k = 0; k < items_per_thread; ++k) {
      const index_t s = first + index_t(k) * threads;
      if (s < steps) p.template linear_step<V, Aligned>(s * V);
    }
    if (Simt::block_x() == 0)
      for (index_t i = steps * V + unsigned(Simt::thread()); i < p.size; i += threads)
        p.template linear_step<1, false>(i);
  }
};

// A strided pass, one element a step, walked in memory order as the linear one is.
struct strided_pass_body {
  template <class Simt, class Pass>
  FUSOR_DEVICE FUSOR_FORCE_INLINE static void run(const Pass& p, int items_per_thread) {
    const index_t threads = unsigned(Simt::block_threads());
    const index_t first = Simt::block_x() * items_per_thread * threads + unsigned(Simt::thread());
    for (int k = 0; k < items_per_thread; ++k) {
      const index_t e = first + index_t(k) * threads;
      if (e < p.size) p.strided_step(p.index_of(e));
    }
  }
};

// A pass by rows along its innermost axis, in steps of V elements (the row
// length a multiple of V, every row start 16-byte aligned), numbered in memory
// order and handed out as the linear body's are. A step finds its multi-index
// once for V elements, and its operands load V consecutive elements or one
// broadcast element.
template <int V>
struct row_pass_body {
  template <class Simt, class Pass>
  FUSOR_DEVICE FUSOR_FORCE_INLINE static void run(const Pass& p, int items_per_thread) {
    const index_t threads = unsigned(Simt::block_threads());
    const index_t steps = p.size / V;
    const index_t first = Simt::block_x() * items_per_thread * threads + unsigned(Simt::thread());
    for (int k = 0; k < items_per_thread; ++k) {
      const index_t s = first + index_t(k) * threads;
      if (s < steps) p.template row_step<V, true>(p.template row_index_of<V>(s));
    }
  }
};

// Calls launch(body, steps) with the body `plan` calls for (a *_pass_body
// value) and the steps it is launched over (vectors, or elements).
template <class Pass, class Launch>
void dispatch_pass(const Pass& p, const pass_plan& plan, Launch&& launch) {
  constexpr int V = Pass::device_lanes;
  if (plan.linear && plan.aligned)
    launch(linear_pass_body<V, true>{}, p.size / V);
  else if (plan.linear)
    launch(linear_pass_body<V, false>{}, p.size / V);
  else if constexpr (Pass::row_capable) {
    if (plan.rows)
      launch(row_pass_body<V>{}, p.size / V);
    else
      launch(strided_pass_body{}, p.size);
  } else {
    launch(strided_pass_body{}, p.size);
  }
}

}  // namespace fusor::detail
