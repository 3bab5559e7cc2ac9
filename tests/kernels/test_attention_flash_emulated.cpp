// The tensor-core flash attention (kernels/attention_flash.hpp,
// attention_flash_backward.hpp) run on the host by the SIMT emulator
// (kernels/simt_emulator.hpp): the same source the GPU runs, so its fragment
// arithmetic is checked where there is no GPU.
// First the emulator itself: mma fragments built by the PTX ISA's formula
// against a plain product, ldmatrix (plain and transposed) feeding mma,
// warp shuffles (of any value) and block barriers, static shared arrays,
// asynchronous copies landing at their wait, and the errors it raises for a
// barrier some threads never reach, a misaligned ldmatrix row or copy,
// shared-memory races, reads of bytes never written and of copies in flight;
// clusters and their hazards; ldmatrix's bank conflicts counted.
// Then the kernels against the fp64 reference, bf16 and fp16, for T = 1 up
// to three blocks, grouped-query heads and head sizes 8 to 128 (padded with
// zero columns), forward and backward (delta, dK and dV blocks, dQ blocks),
// with no shared-memory hazard and no ldmatrix bank conflict.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <fusor/kernels/attention.hpp>
#include <fusor/kernels/attention_flash.hpp>
#include <fusor/kernels/attention_flash_backward.hpp>
#include <fusor/kernels/attention_flash_delta.hpp>
#include <fusor/kernels/simt_emulator.hpp>

#include "kernels/attention_reference.hpp"
#include "kernels/warp_mma_probe.hpp"

using namespace attention_test;
using fusor::detail::emulate_kernel;
using fusor::detail::emulated_simt;
using fusor::detail::simt_grid;

namespace {

// One warp's mma and ldmatrix under the emulator (warp_mma_probe.hpp; the
// CUDA test runs the same probe on the GPU).
template <class T>
void check_mma_against_product() {
  const std::vector<float> a = warp_mma_probe::random_exact_matrix(16 * 16, 1),
                           b = warp_mma_probe::random_exact_matrix(16 * 8, 2);
  warp_mma_probe::results r = warp_mma_probe::poisoned_results();
  emulate_kernel(simt_grid{1, 1}, 32, warp_mma_probe::shared_bytes<T>, [&](unsigned char* shared) {
    warp_mma_probe::run<emulated_simt, T>(a.data(), b.data(), shared, r);
  });
  warp_mma_probe::check(a, b, r, std::string("emulated ") + precision_name<T>());
}

// y, lse (and with `backward`, dqkv) of the flash kernels, emulated, against
// the fp64 reference; with `backward`, delta = rowsum(dy * y) by its kernel
// (attention_flash_delta.hpp), emulated too, against a sum in double.
// KeysUpTo64: the forward's key tiles at heads up to 64 (flash_tiles).
template <class P, int KeysUpTo64 = 64>
void check_flash(const attention_case& c, std::uint32_t seed, bool backward) {
  namespace fd = fusor::detail;
  const std::string what = std::string(precision_name<P>()) + " flash (emulated) " + c.name();
  const index_t HD = c.heads * c.head_dim;
  host_tensor<P, cube_extents> qkv(c.batch, c.time, c.width()), y(c.batch, c.time, HD), dy(c.batch, c.time, HD),
      dqkv(c.batch, c.time, c.width());
  host_tensor<float, cube_extents> lse(c.batch, c.heads, c.time);
  fill_random(qkv, seed, -1.5, 1.5);
  fill_random(dy, seed + 1, -1.0, 1.0);
  poison(y), poison(lse), poison(dqkv);
  const attention_heads heads{c.heads, c.kv_heads};
  const auto f = fd::attention_forward_operands(y.view(), lse.view(), qkv.view(), heads);
  REQUIRE(fd::flash_forward_takes(f));
  fd::with_padded_head_dim("flash attention (emulated)", c.head_dim, [&](auto padded) {
    constexpr int D = decltype(padded)::value;
    using tiles = fd::flash_tiles<D, KeysUpTo64>;
    const auto counted = emulate_kernel(
        {c.batch * c.heads, (c.time + tiles::queries - 1) / tiles::queries}, tiles::threads,
        tiles::template shared_bytes<P>(),
        [&](unsigned char* shared) { fd::flash_forward_block<emulated_simt, D, KeysUpTo64>(f, shared); });
    CHECK(counted.ldmatrix > 0);
    CHECK_MESSAGE(counted.ldmatrix_extra_passes == 0, what, ": the forward's ldmatrix rows share bank groups");
  });
  const auto want = reference(as_doubles(qkv), as_doubles(dy), c);
  compare(what + ", y", as_doubles(y), want.y, attention_tolerance<P>(), HD);
  compare(what + ", lse", as_doubles(lse), want.lse, 2e-3, c.time);
  if (!backward) return;

  // delta = rowsum(dy * y) by the GPU's kernel (emulated; poisoned first),
  // against the sum formed here in double.
  const auto w = fd::attention_backward_operands(dqkv.view(), dy.view(), qkv.view(), y.view(), lse.view(), heads);
  REQUIRE(fd::flash_backward_takes(w));
  REQUIRE(fd::flash_delta_takes(w));
  std::vector<float> delta(std::size_t(c.batch * c.heads * c.time), std::nanf(""));
  // Fewer blocks of rows than the rows fill, as past a grid's 65535: the blocks stride over the rest.
  const index_t delta_blocks = std::max<index_t>(1, fd::flash_delta_grid_y(c.time, c.head_dim) / 2);
  emulate_kernel({c.batch * c.heads, delta_blocks}, fd::flash_delta_threads, 0,
                 [&](unsigned char*) { fd::flash_delta_block<emulated_simt>(w, delta.data()); });
  for (index_t b = 0; b < c.batch; ++b)
    for (index_t h = 0; h < c.heads; ++h)
      for (index_t t = 0; t < c.time; ++t) {
        double sum = 0, magnitude = 0;
        for (index_t x = 0; x < c.head_dim; ++x) {
          const double term =
              convert<double>(dy(b, t, h * c.head_dim + x)) * convert<double>(y(b, t, h * c.head_dim + x));
          sum += term, magnitude += std::abs(term);
        }
        const float got = delta[std::size_t((b * c.heads + h) * c.time + t)];
        if (!(std::abs(double(got) - sum) <= 1e-5 * magnitude + 1e-30)) {  // fp32 sums of exact products
          FAIL_CHECK(what, ": delta at b ", b, ", h ", h, ", t ", t, " is ", got, ", expected ", sum);
          return;
        }
      }
  fd::with_padded_head_dim("flash attention (emulated)", c.head_dim, [&](auto padded) {
    constexpr int D = decltype(padded)::value;
    using tiles = fd::flash_backward_tiles<D>;
    const index_t blocks = (c.time + tiles::rows - 1) / tiles::rows;
    const auto keys = emulate_kernel(
        {c.batch * c.kv_heads, blocks}, tiles::threads, tiles::template key_shared_bytes<P>(),
        [&](unsigned char* shared) { fd::flash_key_gradient_block<emulated_simt, D>(w, delta.data(), shared); });
    const auto queries = emulate_kernel(
        {c.batch * c.heads, blocks}, tiles::threads, tiles::template query_shared_bytes<P>(),
        [&](unsigned char* shared) { fd::flash_query_gradient_block<emulated_simt, D>(w, delta.data(), shared); });
    CHECK(keys.ldmatrix > 0);
    CHECK(queries.ldmatrix > 0);
    CHECK_MESSAGE(keys.ldmatrix_extra_passes + queries.ldmatrix_extra_passes == 0, what,
                  ": the backward's ldmatrix rows share bank groups");
  });
  compare(what + ", dqkv", as_doubles(dqkv), want.dqkv, 2 * attention_tolerance<P>(), c.width());
}

}  // namespace

FUSOR_TEST_CASE("simt emulator: mma fragments by the PTX formula and through ldmatrix give the product") {
  check_mma_against_product<bfloat16>();
  check_mma_against_product<float16>();
}

FUSOR_TEST_CASE("simt emulator: warp shuffles and block barriers") {
  std::vector<float> sums(64, -1.0f), neighbours(64, -1.0f);
  emulate_kernel(simt_grid{2, 1}, 64, 64 * sizeof(float), [&](unsigned char* shared) {
    const int t = emulated_simt::thread();
    float* const slots = reinterpret_cast<float*>(shared);
    slots[t] = float(t + 100 * emulated_simt::block_x());
    emulated_simt::sync_block();
    const float neighbour = slots[(t + 1) % 64];  // written by another warp's thread for t = 63
    float v = float(t);
    for (int mask = 16; mask > 0; mask /= 2) v += emulated_simt::shfl_xor(v, mask);
    if (emulated_simt::block_x() == 1) {
      sums[std::size_t(t)] = v;
      neighbours[std::size_t(t)] = neighbour;
    }
  });
  for (int t = 0; t < 64; ++t) {
    const int warp = t / 32;
    CHECK(sums[std::size_t(t)] == float(32 * 31 / 2 + 32 * 32 * warp));
    CHECK(neighbours[std::size_t(t)] == float((t + 1) % 64 + 100));
  }
}

// What the row kernels use (row_reduce.hpp): shuffles of a struct,
// broadcasts, grid and block sizes, static shared arrays (one per
// instantiation, poisoned, race-checked, bounded).
FUSOR_TEST_CASE("simt emulator: shuffles of any value, static shared arrays, block and grid sizes") {
  using sim = emulated_simt;
  struct triple {
    double a;
    float b;
    int c;
  };
  struct tag_a {};
  struct tag_b {};
  std::vector<triple> got(3 * 64, triple{-1.0, -1.0f, -1});
  std::vector<int> from_shared(3 * 64, -1), sizes(3 * 64, -1);
  emulate_kernel(simt_grid{3, 1}, 64, 16, [&](unsigned char*) {
    const int t = sim::thread();
    const triple mine{t + 0.25, float(2 * t), 3 * t};
    const triple neighbour = sim::shfl_xor(mine, 5);
    const triple lane_7 = sim::shfl(mine, 7);
    int* const a = sim::shared_array<int, 64, tag_a>();
    int* const b = sim::shared_array<int, 64, tag_b>();
    if (a == sim::shared_array<int, 64, tag_a>() && a != b) {  // one array per instantiation
      sim::store_shared(a + t, 10 * t);
      sim::store_shared(b + t, 20 * t);
      sim::sync_block();
      from_shared[std::size_t(64 * sim::block_x() + t)] = sim::load_shared(a + (t + 1) % 64) + sim::load_shared(b + t);
    }
    got[std::size_t(64 * sim::block_x() + t)] = triple{neighbour.a, lane_7.b, neighbour.c + lane_7.c};
    sizes[std::size_t(64 * sim::block_x() + t)] = sim::block_threads() * 100 + int(sim::grid_x()) * 10 +
                                                  sim::cluster_blocks() + sim::cluster_rank();
  });
  for (int x = 0; x < 3; ++x)
    for (int t = 0; t < 64; ++t) {
      const std::size_t i = std::size_t(64 * x + t);
      const int partner = t ^ 5, lane_7 = t / 32 * 32 + 7;
      CHECK(got[i].a == partner + 0.25);
      CHECK(got[i].b == float(2 * lane_7));
      CHECK(got[i].c == 3 * partner + 3 * lane_7);
      CHECK(from_shared[i] == 10 * ((t + 1) % 64) + 20 * t);
      CHECK(sizes[i] == 64 * 100 + 3 * 10 + 1);
    }
  // Static arrays start unwritten in every block (read before a write: an
  // error), race like the rest, and are bounded.
  auto unwritten = [](unsigned char*) {
    if (sim::thread() != 0) return;
    if (sim::block_x() == 0) sim::store_shared(sim::shared_array<int, 4, tag_a>(), 1);
    else (void)sim::load_shared(sim::shared_array<int, 4, tag_a>());
  };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{2, 1}, 32, 0, unwritten); }, {"before any thread"});
  auto racing = [](unsigned char*) { sim::store_shared(sim::shared_array<int, 4, tag_a>(), sim::thread()); };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{1, 1}, 32, 0, racing); }, {"no sync_block"});
  auto too_big = [](unsigned char*) { (void)sim::shared_array<double, 2048, tag_a>(); };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{1, 1}, 32, 0, too_big); }, {"static shared arrays"});
}

// Clusters: the blocks of one run together; each reads another's shared
// memory written before a cluster_sync; the errors for a read with no
// cluster_sync after the write, a write before the others' reads are
// fenced by one, a read after the block exited, and a bad cluster shape.
FUSOR_TEST_CASE("simt emulator: clusters share shared memory across a cluster_sync, and its hazards are errors") {
  using sim = emulated_simt;
  struct tag {};
  std::vector<int> seen(4 * 64, -1), shape(4 * 64, -1);
  emulate_kernel(
      simt_grid{4, 1}, 64, 0,
      [&](unsigned char*) {
        const int t = sim::thread();
        int* const slot = sim::shared_array<int, 64, tag>();
        sim::store_shared(slot + t, 1000 * int(sim::block_x()) + t);
        sim::cluster_sync();
        const int other = (sim::cluster_rank() + 1) % sim::cluster_blocks();
        const int theirs = sim::load_cluster_shared(slot + (t + 1) % 64, other);
        sim::cluster_sync();  // the others have read: the slots may change, the block exit
        sim::store_shared(slot + t, -1);
        seen[std::size_t(64 * sim::block_x() + t)] = theirs;
        shape[std::size_t(64 * sim::block_x() + t)] = 10 * sim::cluster_blocks() + sim::cluster_rank();
      },
      2);
  for (int x = 0; x < 4; ++x)
    for (int t = 0; t < 64; ++t) {
      const int partner = x / 2 * 2 + (x % 2 + 1) % 2;
      CHECK(seen[std::size_t(64 * x + t)] == 1000 * partner + (t + 1) % 64);
      CHECK(shape[std::size_t(64 * x + t)] == 20 + x % 2);
    }
  auto unfenced_read = [](unsigned char*) {
    int* const slot = sim::shared_array<int, 1, tag>();
    if (sim::thread() == 0) sim::store_shared(slot, 1);
    sim::sync_block();
    if (sim::cluster_rank() == 1) (void)sim::load_cluster_shared(slot, 0);  // block 0 wrote it, unfenced
    sim::cluster_sync();
  };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{2, 1}, 32, 0, unfenced_read, 2); },
                             {"block rank", "no cluster_sync between"});
  auto early_write = [](unsigned char*) {
    int* const slot = sim::shared_array<int, 1, tag>();
    if (sim::thread() == 0) sim::store_shared(slot, 1);
    sim::cluster_sync();
    (void)sim::load_cluster_shared(slot, 1 - sim::cluster_rank());
    sim::sync_block();
    if (sim::thread() == 0) sim::store_shared(slot, 2);  // the other block may not have read yet
    sim::cluster_sync();
  };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{2, 1}, 32, 0, early_write, 2); },
                             {"written after block rank", "no cluster_sync between"});
  auto read_after_exit = [](unsigned char*) {
    int* const slot = sim::shared_array<int, 1, tag>();
    if (sim::thread() == 0) sim::store_shared(slot, 1);
    sim::cluster_sync();
    if (sim::cluster_rank() == 1) (void)sim::load_cluster_shared(slot, 0);  // block 0 may have exited
  };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{2, 1}, 32, 0, read_after_exit, 2); },
                             {"after that block exited"});
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{3, 1}, 32, 0, [](unsigned char*) {}, 2); },
                             {"clusters of 2 blocks over a grid of 3"});
}

FUSOR_TEST_CASE("simt emulator: a barrier some threads skip and misaligned rows are errors; copies land at the wait") {
  auto skipped = [](unsigned char*) {
    if (emulated_simt::thread() != 5) emulated_simt::sync_block();
    if (emulated_simt::thread() == 5) emulated_simt::shfl_xor(1.0f, 1);  // waits for lanes that wait elsewhere
  };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{1, 1}, 64, 0, skipped); }, {"never reach"});
  auto misaligned = [](unsigned char* shared) {
    std::uint32_t r[4];
    emulated_simt::ldmatrix_x4<false>(r, shared + 8);
  };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{1, 1}, 32, 256, misaligned); }, {"16-byte aligned"});
  alignas(16) static const unsigned char global[32] = {};
  auto misaligned_copy = [](unsigned char* shared) { emulated_simt::copy_async_16(shared, global + 4); };
  expect_error<fusor::error>([&] { emulate_kernel(simt_grid{1, 1}, 32, 256, misaligned_copy); }, {"16-byte aligned"});
  // A copy lands at its thread's wait, not before: shared memory still holds
  // its NaN bytes until then. A zero-filling copy (not inside) likewise, and
  // it reads nothing from its source.
  bool before_wait_unchanged = false, after_wait_copied = false, zeros_before_wait_unchanged = false,
       after_wait_zeros = false;
  alignas(16) static const unsigned char ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  emulate_kernel(simt_grid{1, 1}, 32, 512, [&](unsigned char* shared) {
    const int t = emulated_simt::thread();
    emulated_simt::copy_async_16_or_zero(shared + 16 * t, ones, t % 2 == 0);
    emulated_simt::commit_async();
    if (t == 0) before_wait_unchanged = shared[0] == 0xff;
    if (t == 1) zeros_before_wait_unchanged = shared[16] == 0xff;
    emulated_simt::wait_async();
    if (t == 0) after_wait_copied = shared[0] == 1 && shared[15] == 1;
    if (t == 1) after_wait_zeros = shared[16] == 0 && shared[31] == 0;
  });
  CHECK(before_wait_unchanged);
  CHECK(after_wait_copied);
  CHECK(zeros_before_wait_unchanged);
  CHECK(after_wait_zeros);
}

FUSOR_TEST_CASE("simt emulator: shared-memory races, reads of unwritten bytes and of copies in flight are errors") {
  using sim = emulated_simt;
  // Right: thread t writes word t; after a barrier each reads its neighbour's
  // (another warp's for t = 31 and 63), and after another writes its own again.
  std::vector<float> seen(64, -1.0f);
  emulate_kernel(simt_grid{1, 1}, 64, 64 * sizeof(float), [&](unsigned char* shared) {
    float* const words = reinterpret_cast<float*>(shared);
    const int t = sim::thread();
    sim::store_shared(words + t, float(t) + 0.5f);
    sim::sync_block();
    seen[std::size_t(t)] = sim::load_shared(words + (t + 1) % 64);
    sim::sync_block();
    sim::store_shared(words + t, 0.0f);
  });
  for (int t = 0; t < 64; ++t) CHECK(seen[std::size_t(t)] == float((t + 1) % 64) + 0.5f);

  // Each hazard below is reported whichever thread the emulator happens to run first.
  auto run = [](auto body) { emulate_kernel(simt_grid{1, 1}, 64, 256, body); };
  auto words = [](unsigned char* shared) { return reinterpret_cast<float*>(shared); };
  // A read of a word another thread wrote with no barrier between (thread 0 runs before 40).
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 0) sim::store_shared(words(shared), 1.0f);
      if (sim::thread() == 40) (void)sim::load_shared(words(shared));
    });
  }, {"hazard", "thread 40", "bytes [0, 4)", "after thread 0 wrote it"});
  // The same with the reader first: the word is then read before anyone wrote it.
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 40) sim::store_shared(words(shared), 1.0f);
      if (sim::thread() == 0) (void)sim::load_shared(words(shared));
    });
  }, {"thread 0", "before any thread of the block wrote it"});
  // A write after another thread's read in the same epoch.
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 0) sim::store_shared(words(shared) + 5, 1.0f);
      sim::sync_block();
      if (sim::thread() == 3) (void)sim::load_shared(words(shared) + 5);
      if (sim::thread() == 50) sim::store_shared(words(shared) + 5, 2.0f);
    });
  }, {"thread 50", "bytes [20, 24)", "after thread 3 read it"});
  // Two threads writing one byte, and several readers then a writer.
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() % 32 == 7) sim::store_shared(shared + 9, static_cast<unsigned char>(sim::thread()));
    });
  }, {"thread 39", "after thread 7 wrote it"});
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 0) sim::zero_shared_16(shared + 32);
      sim::sync_block();
      (void)sim::load_shared(shared + 40);
      if (sim::thread() == 5) sim::store_shared(shared + 40, static_cast<unsigned char>(1));
    });
  }, {"thread 5", "after several threads read it"});
  // Reading one's own copy before its wait, and another thread's before its wait and a barrier.
  alignas(16) static const unsigned char ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 2) {
        sim::copy_async_16(shared + 64, ones);
        sim::commit_async();
        (void)sim::load_shared(shared + 70);
      }
    });
  }, {"thread 2", "bytes [70, 71)", "copy_async to it is in flight (before this thread's wait_async)"});
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 2) {
        sim::copy_async_16(shared + 64, ones);
        sim::commit_async();
      }
      sim::sync_block();  // a barrier, but no wait
      if (sim::thread() == 60) (void)sim::load_shared(shared + 64);
    });
  }, {"thread 60", "thread 2's copy_async to it is in flight"});
  // An ldmatrix row that one thread of the warp filled and others read with no barrier.
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 0)
        for (int i = 0; i < 256; i += 16) sim::zero_shared_16(shared + i);
      std::uint32_t r[4];
      if (sim::thread() < 32) sim::ldmatrix_x4<false>(r, shared + 16 * (sim::thread() % 16));
    });
  }, {"thread 1", "after thread 0 wrote it"});
  // A lane that fails while the rest of its warp waits at ldmatrix: its error, not a read of its stale address.
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) {
      if (sim::thread() == 0) sim::zero_shared_16(shared);
      sim::sync_block();
      std::uint32_t r[4];
      if (sim::thread() == 31) throw fusor::error("lane 31 fails");
      if (sim::thread() < 32) sim::ldmatrix_x4<false>(r, shared);
    });
  }, {"lane 31 fails"});
  // ldmatrix's bank conflicts: rows 128 bytes apart all start in bank 0
  // (eight passes a matrix, seven extra), rows 144 bytes apart in eight
  // different groups (none), one row read by all eight lanes of a matrix once (a broadcast).
  for (const auto& [stride, repeat, extra] : {std::tuple{128, false, 4 * 7}, std::tuple{144, false, 0},
                                              std::tuple{144, true, 0}}) {
    const auto counted = emulate_kernel(simt_grid{1, 1}, 32, 8 * 144 * 4, [&](unsigned char* shared) {
      const int lane = sim::thread();
      for (int i = lane; i < 8 * 144 * 4 / 16; i += 32) sim::zero_shared_16(shared + 16 * i);
      sim::sync_block();
      std::uint32_t r[4];
      sim::ldmatrix_x4<false>(r, shared + (repeat ? 0 : lane) * stride);
    });
    INFO("rows ", stride, " bytes apart", repeat ? ", all the same row" : "");
    CHECK(counted.ldmatrix == 1);
    CHECK(counted.ldmatrix_extra_passes == std::uint64_t(extra));
  }
  // Out of range and misaligned plain accesses.
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) { sim::store_shared(words(shared) + 64, 1.0f); });
  }, {"store_shared", "outside the block's shared memory"});
  expect_error<fusor::error>([&] {
    run([&](unsigned char* shared) { (void)sim::load_shared(reinterpret_cast<float*>(shared + 2)); });
  }, {"load_shared", "byte 2 of the block's 256 bytes", "4-byte aligned"});
}

FUSOR_TEST_CASE("flash attention forward and backward (tensor-core fragments, emulated) against the fp64 softmax") {
  std::uint32_t seed = 300;
  const std::vector<attention_case> cases = {
      {2, 1, 2, 2, 16},    // T = 1
      {1, 37, 3, 3, 24},   // inside one block, head_dim padded 24 -> 32
      {1, 128, 2, 2, 64},  // exactly one block of 128 rows
      {1, 130, 4, 2, 32},  // grouped-query, two blocks, the second of two rows
      {1, 70, 2, 1, 128},  // multi-query, the largest head
      {1, 150, 1, 1, 128}, // the largest head: two forward blocks, three backward ones (64 rows), tiles of 32
      {1, 20, 2, 2, 8},    // head_dim 8 padded to 16
      {1, 260, 2, 1, 64},  // three blocks, the last of four rows: tiles walked through both stages, many times
  };
  for (const auto& c : cases) check_flash<bfloat16>(c, seed += 2, true);
  check_flash<float16>({1, 97, 2, 2, 64}, 390, true);
}

FUSOR_TEST_CASE("flash attention forward with 128-key tiles (the benchmark's variant), emulated, against the fp64 softmax") {
  std::uint32_t seed = 500;
  const std::vector<attention_case> cases = {
      {1, 37, 2, 2, 24},   // inside one tile, head_dim padded 24 -> 32
      {1, 300, 2, 1, 64},  // three blocks, tiles through both stages, a partial last tile
      {2, 130, 2, 2, 16},  // two blocks, the second of two rows
  };
  for (const auto& c : cases) check_flash<bfloat16, 128>(c, seed += 2, false);
  check_flash<float16, 128>({1, 200, 1, 1, 64}, 590, false);
}

FUSOR_TEST_CASE("flash attention takes heads of a multiple of 8 columns in 16-byte aligned rows, and nothing else") {
  namespace fd = fusor::detail;
  auto takes = [](index_t heads, index_t head_dim, index_t offset) {
    const index_t width = 3 * heads * head_dim;
    host_tensor<bfloat16, cube_extents> qkv(2, 5, width + offset), y(2, 5, heads * head_dim),
        dy(2, 5, heads * head_dim), dqkv(2, 5, width);
    host_tensor<float, cube_extents> lse(2, heads, 5);
    // qkv seen from column `offset`: its rows start `offset` elements into each row.
    const auto qkv_view = slice<2>(qkv.view(), offset, offset + width);
    const auto f = fd::attention_forward_operands(y.view(), lse.view(), qkv_view, {heads, heads});
    const auto w = fd::attention_backward_operands(dqkv.view(), dy.view(), qkv_view, y.view(), lse.view(),
                                                   {heads, heads});
    CHECK(fd::flash_forward_takes(f) == fd::flash_backward_takes(w));
    return fd::flash_forward_takes(f);
  };
  CHECK(takes(2, 64, 0));
  CHECK(takes(1, 128, 0));
  CHECK(takes(3, 8, 0));
  CHECK_FALSE(takes(2, 12, 0));   // not a multiple of 8 columns
  CHECK_FALSE(takes(1, 136, 0));  // past 128
  CHECK_FALSE(takes(2, 64, 4));   // rows start 8 bytes past a 16-byte boundary
  CHECK_FALSE(takes(2, 64, 1));   // and 2 bytes
}
