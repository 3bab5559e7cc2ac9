// fusor/nn/random.hpp — counter-based random numbers: the value for (seed,
// counter) is a pure function, so dropout masks and initial weights are the
// same on the host and the GPU, in any thread order, and reproducible from the
// seed alone (no generator state to save or to share between threads).
#pragma once

#include <cstdint>

#include "fusor/config.hpp"

namespace fusor::nn {

/// A 64-bit mix of (seed, counter): two rounds of SplitMix64's finaliser.
FUSOR_HOST_DEVICE inline std::uint64_t random_bits(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter + 0x632BE59BD9B4E019ull;
  for (int round = 0; round < 2; ++round) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return z;
}

/// Uniform in [0, 1), 24 random bits (exactly representable in float).
FUSOR_HOST_DEVICE inline float random_uniform(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<float>(random_bits(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/// A seed for a part of the model (a layer, a parameter) derived from the model's.
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t part) { return random_bits(seed, part ^ 0xA5A5A5A5ull); }

}  // namespace fusor::nn
