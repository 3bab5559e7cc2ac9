// epoch_permutation and its pieces: a permutation of 0..n-1, the same for the
// same (seed, epoch) and different otherwise; every permutation of three items
// equally likely; uniform_below unbiased; the engine is the standard's
// mt19937_64 (its 10000th output is fixed by the C++ standard), so the order
// is the same with every standard library.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include <fusor/data/epoch_engine.hpp>
#include <fusor/data/permutation.hpp>

#include "data/data_support.hpp"

using namespace data_test;
using fusor::data::epoch_permutation;

TEST_CASE("epoch_permutation is a permutation fixed by (seed, epoch)") {
  for (const index_t n : {0, 1, 2, 7, 1000, 60000}) {
    const auto order = epoch_permutation(n, 5, 3);
    REQUIRE(index_t(order.size()) == n);
    std::vector<index_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (index_t i = 0; i < n; ++i) REQUIRE(sorted[std::size_t(i)] == i);
    CHECK(epoch_permutation(n, 5, 3) == order);
    if (n >= 1000) {
      CHECK(epoch_permutation(n, 6, 3) != order);
      CHECK(epoch_permutation(n, 5, 4) != order);
      // Seed and epoch are not interchangeable.
      CHECK(epoch_permutation(n, 3, 5) != order);
      // Shuffled, not nearly sorted: few items stay in place.
      index_t fixed = 0;
      for (index_t i = 0; i < n; ++i) fixed += order[std::size_t(i)] == i;
      CHECK(fixed < 20);
    }
  }
}

TEST_CASE("epoch_permutation makes every order of three items equally likely") {
  std::map<std::vector<index_t>, int> seen;
  const int draws = 60000;
  for (int e = 0; e < draws; ++e) ++seen[epoch_permutation(3, 11, std::uint64_t(e))];
  REQUIRE(seen.size() == 6);
  for (const auto& [order, times] : seen) CHECK(std::abs(times - draws / 6) < 400);  // ~4.5 standard deviations
}

TEST_CASE("uniform_below draws every value below the bound equally often") {
  auto engine = fusor::data::epoch_engine(1, 2);
  for (const std::uint64_t bound : {1ull, 2ull, 7ull, 1000ull, (1ull << 63) + 12345ull}) {
    for (int i = 0; i < 1000; ++i) REQUIRE(fusor::data::uniform_below(engine, bound) < bound);
  }
  std::array<int, 7> counts{};
  const int draws = 70000;
  for (int i = 0; i < draws; ++i) ++counts[fusor::data::uniform_below(engine, 7)];
  for (const int c : counts) CHECK(std::abs(c - draws / 7) < 450);  // ~4.8 standard deviations
}

TEST_CASE("the engine is the standard's mt19937_64, seeded from mixed bits") {
  // [rand.predef]: the 10000th consecutive output of a default-constructed mt19937_64.
  std::mt19937_64 standard;
  standard.discard(9999);
  CHECK(standard() == 9981545732273789042ull);
  // epoch_engine is that engine, seeded with mix_bits(mix_bits(seed) ^ epoch).
  auto engine = fusor::data::epoch_engine(123, 4);
  std::mt19937_64 same(fusor::data::mix_bits(fusor::data::mix_bits(123) ^ 4));
  for (int i = 0; i < 100; ++i) CHECK(engine() == same());
  // Nearby inputs give unrelated seeds: about half of the 64 bits differ.
  for (std::uint64_t x = 0; x < 64; ++x) {
    const int differing = std::popcount(fusor::data::mix_bits(x) ^ fusor::data::mix_bits(x + 1));
    CHECK(differing > 12);
    CHECK(differing < 52);
  }
}
