// fusor/data/permutation.hpp — epoch_permutation: the order a loader visits its
// samples in, fixed by (seed, epoch) and the same with every compiler and
// standard library.
//
// std::shuffle and std::uniform_int_distribution are free to differ between
// standard libraries; std::mt19937_64's output is not (the standard fixes it).
// So the engine is the standard's (data/epoch_engine.hpp, with the unbiased
// integers below a bound), and Fisher-Yates is written out here. This header
// leaves <random> to the definitions, which most programs do not compile.
#pragma once

#include <cstdint>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"

namespace fusor::data {

/// 0..n-1 shuffled (Fisher-Yates) by the engine of (seed, epoch).
FUSOR_DECL std::vector<index_t> epoch_permutation(index_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/permutation.ipp"
#endif
