// fusor/data/epoch_engine.hpp — the random draws behind fusor's data orders:
// the standard's std::mt19937_64 seeded from (seed, epoch) through SplitMix64,
// and unbiased integers below a bound. epoch_permutation (data/permutation.hpp)
// and the character corpus's batches draw from them; both give the same
// numbers with every compiler and standard library.
#pragma once

#include <cstdint>
#include <random>

#include "fusor/config.hpp"

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

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/epoch_engine.ipp"
#endif
