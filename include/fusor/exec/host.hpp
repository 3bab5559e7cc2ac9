// fusor/exec/host.hpp — the host executor: a pass is one loop, parallel over
// OpenMP threads when OpenMP is on.
//
// The linear path is a plain element loop that the compiler vectorises (omp
// simd); the strided path walks each thread's range in the destination's
// memory order.
#pragma once

#include <algorithm>

#include "fusor/config.hpp"
#include "fusor/exec/pass.hpp"

#if FUSOR_HAS_OPENMP
#include <omp.h>
#endif

namespace fusor {

/// Runs passes on the host: one loop, parallel over OpenMP threads when OpenMP is on.
struct host_executor {
  /// OpenMP threads for one pass; 0 takes OpenMP's default, 1 runs serially.
  int threads = 0;
  /// Below this many elements a pass runs serially: thread start-up would cost more.
  index_t parallel_threshold = 1 << 15;

  /// Runs pass `p` as `plan` says (linear and vectorised, or strided in memory order); returns when done.
  template <class Pass>
  void run(const Pass& p, pass_plan plan) const {
    const index_t n = p.size;
    const int team = thread_count(n);
    if (plan.linear) {
      // One element per iteration and `omp simd`: the compiler vectorises the
      // whole expression as it would a hand-written loop. Every read of element i
      // happens before its write, so elementwise aliasing stays correct.
      // (`if (parallel: ...)`: a plain `if` clause would also turn off simd.)
#if FUSOR_HAS_OPENMP
#pragma omp parallel for simd num_threads(team) schedule(static) if (parallel : team > 1)
#endif
      for (index_t i = 0; i < n; ++i) p.template linear_step<1, false>(i);
    } else {
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
      for (int t = 0; t < team; ++t) {
        const index_t begin = n * t / team, end = n * (t + 1) / team;
        if (begin == end) continue;
        auto idx = p.index_of(begin);
        for (index_t i = begin; i < end; ++i) {
          p.strided_step(idx);
          p.advance(idx);
        }
      }
    }
  }

  /// The OpenMP threads a loop over `n` elements uses: 1 below parallel_threshold or without OpenMP.
  int thread_count(index_t n) const {
#if FUSOR_HAS_OPENMP
    if (n < parallel_threshold) return 1;
    return threads > 0 ? threads : omp_get_max_threads();
#else
    (void)n;
    return 1;
#endif
  }

  /// Whether every operand of `Target` is host-accessible.
  template <class Target>
  static constexpr bool can_run = target_readable_from_host_v<Target>;
  static constexpr const char* name = "host";  ///< The executor's name.
};

}  // namespace fusor
