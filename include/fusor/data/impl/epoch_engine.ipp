// fusor/data/impl/epoch_engine.ipp — definitions of fusor/data/epoch_engine.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/data/epoch_engine.hpp"

#include <cstdint>
#include <random>

namespace fusor::data {

FUSOR_DECL std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound) {
  const std::uint64_t rejected = (0 - bound) % bound;  // 2^64 mod bound
  std::uint64_t draw;
  do draw = engine();
  while (draw < rejected);
  return draw % bound;
}

}  // namespace fusor::data
