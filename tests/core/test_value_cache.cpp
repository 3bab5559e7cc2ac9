// The caches of values worked out once (fusor/core/value_cache.hpp), on the
// host: a value per device or per key, computed once, kept apart from every
// other device's or key's, tried again after a throw, and safe across threads.
#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include <fusor/core/value_cache.hpp>

namespace {

struct suggestion {
  int min_grid = 0;
  int block = 0;
};

}  // namespace

TEST_CASE("per-device cache: one value per device, computed once each") {
  fusor::detail::per_device_cache<suggestion, 4> cache;
  int calls = 0;
  auto for_device = [&](int device) {
    return [&calls, device] {
      ++calls;
      return suggestion{100 + device, 32 * (device + 1)};
    };
  };
  CHECK(cache.get(0, for_device(0)).min_grid == 100);
  CHECK(cache.get(1, for_device(1)).min_grid == 101);  // a second GPU gets its own numbers
  CHECK(cache.get(0, for_device(1)).min_grid == 100);  // device 0's, kept
  CHECK(cache.get(1, for_device(0)).block == 64);
  CHECK(calls == 2);
  // Past the cached devices: computed on every call, never mixed up with another.
  CHECK(cache.get(4, for_device(4)).min_grid == 104);
  CHECK(cache.get(4, for_device(4)).min_grid == 104);
  CHECK(calls == 4);
}

TEST_CASE("per-device cache: a failed computation is tried again; threads compute a device once") {
  fusor::detail::per_device_cache<int, 2> cache;
  CHECK_THROWS_AS(cache.get(0, []() -> int { throw std::runtime_error("no device"); }), std::runtime_error);
  CHECK(cache.get(0, [] { return 7; }) == 7);

  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  std::vector<int> seen(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      seen[std::size_t(t)] = cache.get(1, [&] {
        ++calls;
        return 11;
      });
    });
  for (auto& t : threads) t.join();
  CHECK(calls.load() == 1);
  for (const int v : seen) CHECK(v == 11);
}

TEST_CASE("keyed cache: one value per key, computed once each") {
  // Keyed as the occupancy caches are: device, threads, shared bytes.
  using key = std::tuple<int, int, std::size_t>;
  fusor::detail::keyed_cache<key, int> cache;
  int calls = 0;
  auto counted = [&calls](int value) {
    return [&calls, value] {
      ++calls;
      return value;
    };
  };
  CHECK(cache.get({0, 128, 0}, counted(16)) == 16);
  CHECK(cache.get({1, 128, 0}, counted(12)) == 12);    // another device
  CHECK(cache.get({0, 256, 0}, counted(8)) == 8);      // another block size
  CHECK(cache.get({0, 128, 49152}, counted(3)) == 3);  // other shared bytes
  CHECK(cache.get({0, 128, 0}, counted(99)) == 16);    // kept: not computed again
  CHECK(cache.get({1, 128, 0}, counted(99)) == 12);
  CHECK(calls == 4);
  // A value of 0 is a value like any other (a kernel no cluster of which fits).
  CHECK(cache.get({2, 512, 0}, counted(0)) == 0);
  CHECK(cache.get({2, 512, 0}, counted(5)) == 0);
  CHECK(calls == 5);
}

TEST_CASE("keyed cache: a throw stores nothing; threads racing on a key all get the first value stored") {
  fusor::detail::keyed_cache<int, int> cache;
  CHECK_THROWS_AS(cache.get(3, []() -> int { throw std::runtime_error("occupancy query failed"); }),
                  std::runtime_error);
  CHECK(cache.get(3, [] { return 7; }) == 7);

  std::vector<std::thread> threads;
  std::vector<int> seen(8, -1);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { seen[std::size_t(t)] = cache.get(4, [t] { return 100 + t; }); });
  for (auto& t : threads) t.join();
  for (const int v : seen) CHECK(v == seen[0]);  // whichever computed first, every thread has its value
  CHECK(seen[0] >= 100);
  CHECK(seen[0] < 108);
  CHECK(cache.get(4, [] { return -1; }) == seen[0]);
}

TEST_CASE("keyed cache: update changes a value in place, one thread at a time") {
  // As gpu::allow_dynamic_shared keeps a kernel's limit: only ever raised.
  fusor::detail::keyed_cache<int, std::size_t> most;
  int raised = 0;
  auto allow = [&](int kernel, std::size_t bytes) {
    most.update(kernel, [&](std::size_t& limit) {
      if (bytes <= limit) return;
      ++raised;
      limit = bytes;
    });
  };
  allow(1, 60000);
  allow(1, 50000);  // smaller: left as it is
  allow(2, 50000);  // another kernel: its own limit
  allow(1, 70000);
  CHECK(raised == 3);
  CHECK(most.get(1, [] { return std::size_t(0); }) == 70000);
  CHECK(most.get(2, [] { return std::size_t(0); }) == 50000);

  // A throwing change leaves the value as it was.
  CHECK_THROWS_AS(most.update(1, [](std::size_t&) { throw std::runtime_error("cudaFuncSetAttribute failed"); }),
                  std::runtime_error);
  CHECK(most.get(1, [] { return std::size_t(0); }) == 70000);

  // Many threads adding one each under the lock lose no addition.
  fusor::detail::keyed_cache<int, long> counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) counter.update(0, [](long& v) { ++v; });
    });
  for (auto& t : threads) t.join();
  CHECK(counter.get(0, [] { return 0L; }) == 8000);
}
