// fusor/data/impl/permutation.ipp — definitions of fusor/data/permutation.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/data/permutation.hpp"
#include "fusor/data/epoch_engine.hpp"

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace fusor::data {

FUSOR_DECL std::vector<index_t> epoch_permutation(index_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<index_t> order(static_cast<std::size_t>(n > 0 ? n : 0));
  std::iota(order.begin(), order.end(), index_t(0));
  auto engine = epoch_engine(seed, epoch);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[uniform_below(engine, i)]);
  return order;
}

}  // namespace fusor::data
