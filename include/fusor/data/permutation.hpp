// fusor/data/permutation.hpp — epoch_permutation: the order a loader visits its
// samples in, fixed by (seed, epoch) and the same with every compiler and
// standard library.
//
// std::shuffle and std::uniform_int_distribution are free to differ between
// standard libraries; std::mt19937_64's output is not (the standard fixes it).
// So the engine is the standard's, and what turns its draws into a permutation
// (seed mixing, unbiased integers below a bound, Fisher-Yates) is written here.
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"

namespace fusor::data {

/// SplitMix64's finaliser: nearby seeds and epochs give unrelated engine states.
constexpr std::uint64_t mix_bits(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The engine for one epoch of one seed.
inline std::mt19937_64 epoch_engine(std::uint64_t seed, std::uint64_t epoch) {
  return std::mt19937_64(mix_bits(mix_bits(seed) ^ epoch));
}

/// A uniform integer in [0, bound), bound >= 1: the lowest 2^64 mod `bound`
/// draws are rejected, so no value is favoured.
FUSOR_DECL std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound);

/// 0..n-1 shuffled (Fisher-Yates) by the engine of (seed, epoch).
FUSOR_DECL std::vector<index_t> epoch_permutation(index_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/permutation.ipp"
#endif
