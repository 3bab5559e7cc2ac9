// fusor/kernels/rows_host.hpp — what the row-wise kernels' host
// implementations share: rows spread over the host executor's OpenMP threads,
// row loops the compiler vectorises (an exp it can vectorise, blocked sums,
// compile-time unit strides for contiguous rows).
//
// Row loops live in plain functions of pointers and strides, not in lambdas
// over captured pointers: under `omp simd` GCC otherwise reloads a captured
// pointer in every iteration and turns contiguous loads into gathers.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/expr/host_math.hpp"

#if FUSOR_HAS_OPENMP
#include <omp.h>
#endif

// `#pragma omp simd <clauses>` where OpenMP is on: the host loops over a row.
#define FUSOR_PRAGMA(text) _Pragma(#text)
#if FUSOR_HAS_OPENMP
#define FUSOR_OMP_SIMD(clauses) FUSOR_PRAGMA(omp simd clauses)
#else
#define FUSOR_OMP_SIMD(clauses)
#endif

namespace fusor::detail {

// body(r, scratch) for every row r, rows spread over the executor's OpenMP
// threads; scratch is a per-thread buffer of `scratch_size` values of S.
template <class S, class Body>
void for_each_row(const host_executor& ex, index_t rows, index_t length, index_t scratch_size, Body&& body) {
  const int team = ex.thread_count(rows * (length > 0 ? length : 1));
#if FUSOR_HAS_OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
#endif
  {
    std::vector<S> scratch(static_cast<std::size_t>(scratch_size));
#if FUSOR_HAS_OPENMP
#pragma omp for schedule(static)
#endif
    for (index_t r = 0; r < rows; ++r) body(r, scratch.data());
  }
  (void)team;
}

// host_exp(float) (expr/host_math.hpp) is the exp the compiler vectorises; fp64 uses std::exp.
FUSOR_FORCE_INLINE double host_exp(double x) { return std::exp(x); }

// The sum of term(j) over j in [0, n): blocks of 1024 terms summed in
// vector lanes, then the block sums in order. A plain running sum of 10^5
// fp32 terms can lose 10^-4 relative; this loses about as much as the GPU's
// per-thread sums and tree do (10^-6).
template <class S, class Term>
FUSOR_FORCE_INLINE S row_sum(index_t n, Term&& term) {
  constexpr index_t block = 1024;
  S total = 0;
  for (index_t begin = 0; begin < n; begin += block) {
    const index_t end = begin + block < n ? begin + block : n;
    S partial = 0;
    FUSOR_OMP_SIMD(reduction(+ : partial))
    for (index_t j = begin; j < end; ++j) partial += term(j);
    total += partial;
  }
  return total;
}

// Two such sums in one pass over the row.
template <class S, class TermA, class TermB>
FUSOR_FORCE_INLINE std::pair<S, S> row_sums(index_t n, TermA&& term_a, TermB&& term_b) {
  constexpr index_t block = 1024;
  S total_a = 0, total_b = 0;
  for (index_t begin = 0; begin < n; begin += block) {
    const index_t end = begin + block < n ? begin + block : n;
    S a = 0, b = 0;
    FUSOR_OMP_SIMD(reduction(+ : a, b))
    for (index_t j = begin; j < end; ++j) {
      a += term_a(j);
      b += term_b(j);
    }
    total_a += a;
    total_b += b;
  }
  return {total_a, total_b};
}

// f(strides...) with every stride a compile-time 1 when all are 1, so the
// contiguous case vectorises; the run-time strides otherwise.
template <class F, class... Stride>
FUSOR_FORCE_INLINE void with_unit_strides(F&& f, Stride... strides) {
  if (((strides == 1) && ...))
    f((void(strides), std::integral_constant<index_t, 1>{})...);
  else
    f(index_t(strides)...);
}

}  // namespace fusor::detail
