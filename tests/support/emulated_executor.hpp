// tests/support/emulated_executor.hpp — an executor for the host tests that
// runs each pass as the cuda executor does, through the same kernel bodies
// (exec/pass_kernels.hpp), launch arithmetic (exec/launch_shape.hpp) and
// dispatch, but on the CPU under the SIMT emulator (kernels/simt_emulator.hpp)
// and on host memory. The core tests compiled with FUSOR_TEST_EMULATED run
// under it (fusor_core_emulated_tests), so the vector loads and stores of
// every expression node, the tails and the steps each thread takes are checked
// without a GPU. Host builds only.
#pragma once

#include <algorithm>
#include <cstdint>

#include <fusor/config.hpp>
#include <fusor/core/cuda_runtime.hpp>
#include <fusor/exec/launch_shape.hpp>
#include <fusor/exec/pass.hpp>
#include <fusor/exec/pass_kernels.hpp>
#include <fusor/kernels/simt_emulator.hpp>

namespace fusor_test {

struct emulated_gpu_executor {
  /// Block size and items per thread; zeros leave them to `suggested`, as the occupancy API's answer would.
  fusor::launch_policy launch{};
  /// What the occupancy API answers for this emulated GPU: blocks that fill it once, threads a block.
  /// Small, so that a pass of a million elements takes a few dozen blocks, each thread many steps.
  fusor::detail::occupancy_suggestion suggested{8, 128};

  template <class Pass>
  void run(const Pass& p, fusor::pass_plan plan) const {
    if (p.size == 0) return;
    fusor::detail::dispatch_pass(p, plan, [&](auto body, fusor::index_t steps) {
      const fusor::detail::launch_shape shape =
          fusor::detail::plan_launch(launch, std::max<fusor::index_t>(steps, 1), suggested);
      fusor::detail::emulate_kernel(fusor::detail::simt_grid{shape.grid, 1}, shape.block, 0, [&](unsigned char*) {
        decltype(body)::template run<fusor::detail::emulated_simt>(p, shape.items);
      });
      fusor::gpu::launch_counter().fetch_add(1);  // one launch, as on the GPU
    });
  }

  template <class Target>
  static constexpr bool can_run = fusor::target_readable_from_host_v<Target>;  // the emulator reads host memory
  static constexpr const char* name = "emulated";
};

}  // namespace fusor_test
