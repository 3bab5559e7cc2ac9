// fusor::comm::mpi under mpirun: every collective against double references in
// fp32, bf16 and fp16, odd sizes, in place and out of place, every root,
// megabyte messages; int32/int64/double sums and maxima exact; point-to-point
// round a ring; shape errors; a failed MPI
// call names the call, the rank and MPI's message; a request can be tested until done.
#include <fusor/comm/launch.hpp>
#include <fusor/comm/mpi.hpp>

#include "comm/collective_checks.hpp"
#include "comm/mpi_world.hpp"

using namespace comm_test;

TEST_CASE("comm::mpi: ranks") {
  auto& c = world();
  INFO("rank ", c.rank());
  CHECK(c.size() >= 2);
  CHECK(c.rank() >= 0);
  CHECK(c.rank() < c.size());
  CHECK(c.local_rank() == c.rank());  // one machine
  // What mpirun told this process, before MPI started, agrees.
  const fusor::comm::launch_info launched = fusor::comm::launch_from_environment();
  CHECK(launched.found);
  CHECK(launched.launcher == "OpenMPI");
  CHECK(launched.rank == c.rank());
  CHECK(launched.size == c.size());
  CHECK(launched.local_rank == c.local_rank());
}

TEST_CASE("comm::mpi: collectives") {
  auto& c = world();
  INFO("rank ", c.rank(), " of ", c.size());
  SUBCASE("fp32") { check_collectives<fp32>(c); }
  SUBCASE("bf16") { check_collectives<bf16>(c); }
  SUBCASE("fp16") { check_collectives<fp16>(c); }
}

// Megabytes per rank: past OpenMPI's eager limit, so the rendezvous path (and,
// on one machine, its shared-memory copy mechanism) is exercised too.
TEST_CASE("comm::mpi: large messages") {
  auto& c = world();
  INFO("rank ", c.rank(), " of ", c.size());
  check_all_reduce<fp32>(c, index_t{1} << 20, reduction_op::sum, false, 900);
  check_all_reduce<bf16>(c, (index_t{1} << 20) + 3, reduction_op::avg, true, 901);
  check_all_gather<fp16>(c, (index_t{1} << 19) + 1, false, 902);
  check_reduce_scatter<fp32>(c, (index_t{1} << 18) + 5, reduction_op::max, false, 903);
  check_reduce_scatter<bf16>(c, (index_t{1} << 18) + 7, reduction_op::sum, true, 905);
  check_broadcast<fp32>(c, index_t{1} << 20, c.size() - 1, 904);
}

// Integers and doubles travel as MPI's own types: sums and maxima are exact.
template <class T>
void check_exact_all_reduce(fusor::comm::mpi& c, index_t n) {
  auto value = [](index_t i, int q) { return T(((i * 7919 + q * 104729) % 20011) - 10000); };
  host_tensor<T, flat_extents> x{flat_extents(n)}, sum{flat_extents(n)}, largest{flat_extents(n)};
  for (index_t i = 0; i < n; ++i) {
    x.data()[i] = value(i, c.rank());
    sum.data()[i] = largest.data()[i] = T(-999999);  // poison
  }
  c.all_reduce(x, sum, reduction_op::sum).wait();
  c.all_reduce(x, largest, reduction_op::max).wait();
  index_t bad = 0;
  for (index_t i = 0; i < n; ++i) {
    T want_sum = 0, want_max = value(i, 0);
    for (int q = 0; q < c.size(); ++q) {
      want_sum += value(i, q);
      want_max = std::max(want_max, value(i, q));
    }
    bad += sum.data()[i] != want_sum || largest.data()[i] != want_max;
  }
  CHECK_MESSAGE(bad == 0, bad, " of ", n, " elements wrong (", sizeof(T), "-byte type)");
}

TEST_CASE("comm::mpi: integer and double all_reduce are exact") {
  auto& c = world();
  INFO("rank ", c.rank(), " of ", c.size());
  for (index_t n : {index_t{1}, index_t{7}, index_t{4099}}) {
    check_exact_all_reduce<std::int32_t>(c, n);
    check_exact_all_reduce<std::int64_t>(c, n);
    check_exact_all_reduce<double>(c, n);
  }
}

TEST_CASE("comm::mpi: send and recv round a ring") {
  auto& c = world();
  INFO("rank ", c.rank());
  const int next = (c.rank() + 1) % c.size(), previous = (c.rank() + c.size() - 1) % c.size();
  for (index_t n : {index_t{1}, index_t{1001}}) {
    const auto mine = input<bf16>(n, 55, c.rank());
    auto theirs = poisoned<bf16>(n);
    auto received = c.recv(theirs, previous, 3);
    auto sent = [&] {
      [[maybe_unused]] auto group = c.group();  // nothing to group for MPI; portable code writes it anyway
      return c.send(mine, next, 3);
    }();
    received.wait();
    sent.wait();
    expect_close<bf16>(theirs, gathered<bf16>(n, 55, previous + 1), n * previous, 0.0, "ring");
  }
}

// Pairs of ranks (0 with 1, 2 with 3; an odd last rank sits out): `sender` is the even one.
struct pair_of_ranks {
  bool in_pair, sender;
  int peer;
};
pair_of_ranks pair_of(const fusor::comm::mpi& c) {
  const bool in_pair = c.rank() + 1 < c.size() || c.rank() % 2 == 1;
  return {in_pair, c.rank() % 2 == 0, c.rank() % 2 == 0 ? c.rank() + 1 : c.rank() - 1};
}

// With the collective check on (the default), a message is measured before MPI gets its recv's buffer: Open MPI
// would write a longer message past the buffer's end, and leave a shorter one's rest unwritten, silently.
TEST_CASE("comm::mpi: a send and its recv of different sizes throw on the receiving rank; its buffer is untouched") {
  auto& c = world();
  REQUIRE(c.checks_collectives());
  const pair_of_ranks p = pair_of(c);
  INFO("rank ", c.rank());
  // Eager (small) and rendezvous (megabytes) messages, longer and shorter than the recv.
  for (const auto& [sent, expected] : {std::pair<index_t, index_t>{1024, 512}, {256, 512}, {1 << 20, 1 << 19}}) {
    if (!p.in_pair) continue;
    if (p.sender) {
      const auto x = input<fp32>(sent, 31, c.rank());
      c.send(x, p.peer, 7).wait();  // the receiver takes the whole message in
      continue;
    }
    std::vector<float> memory(std::size_t(2 * std::max(sent, expected)), -7.0f);  // the buffer and what follows
    const fusor::view<float, flat_extents> buffer(memory.data(), flat_extents(expected));
    const std::string sizes = "sent " + std::to_string(sent * 4) + " bytes, this recv's buffer holds " +
                              std::to_string(expected * 4);
    expect_error<fusor::comm::mpi_mismatch_error>(
        [&] { c.recv(buffer, p.peer, 7).wait(); },
        {"recv from rank", sizes.c_str(), "different sizes", "not written"});
    CHECK(std::count(memory.begin(), memory.end(), -7.0f) == std::ptrdiff_t(memory.size()));
  }
  // The communicator goes on: messages of the right size arrive.
  if (p.in_pair) {
    const auto x = input<fp32>(300, 32, c.rank());
    auto y = poisoned<fp32>(300);
    auto received = c.recv(y, p.peer, 8);
    auto sent = c.send(x, p.peer, 8);
    sent.wait();
    received.wait();
    expect_close<fp32>(y, gathered<fp32>(300, 32, p.peer + 1), 300 * p.peer, 0.0, "after a mismatch");
  }
}

// Checked or not, receives from one peer with one tag take its messages in the order they were started, however
// they are waited for; a rank waiting for its own (megabyte) send still takes in its peer's.
TEST_CASE("comm::mpi: recvs match in the order they start, and sends and recvs of a pair never wait for each other") {
  auto& world_c = world();
  const pair_of_ranks p = pair_of(world_c);
  for (const bool checked : {true, false}) {
    fusor::comm::mpi c(world_c.native(), {.check_collectives = checked});
    INFO("rank ", c.rank(), checked ? " (checked)" : " (unchecked)");
    if (!p.in_pair) continue;
    constexpr index_t n = 777;
    if (p.sender) {
      std::vector<flat<fp32>> messages;
      for (std::uint32_t k = 0; k < 3; ++k) messages.push_back(input<fp32>(n, 40 + k, c.rank()));
      for (auto& m : messages) c.send(m, p.peer, 9).wait();
    } else {
      std::vector<flat<fp32>> buffers;
      for (int k = 0; k < 3; ++k) buffers.push_back(poisoned<fp32>(n));
      std::vector<fusor::comm::mpi_request> receives;
      for (auto& b : buffers) receives.push_back(c.recv(b, p.peer, 9));
      for (int k = 2; k >= 0; --k) receives[std::size_t(k)].wait();
      for (std::uint32_t k = 0; k < 3; ++k)
        expect_close<fp32>(buffers[k], gathered<fp32>(n, 40 + k, p.peer + 1), n * p.peer, 0.0, "in order");
    }
    // Both ranks send first and wait for their send before their recv.
    constexpr index_t big = index_t{1} << 20;
    const auto mine = input<fp32>(big, 50, c.rank());
    auto theirs = poisoned<fp32>(big);
    auto sent = c.send(mine, p.peer, 10);
    auto received = c.recv(theirs, p.peer, 10);
    sent.wait();
    received.wait();
    expect_close<fp32>(theirs, gathered<fp32>(big, 50, p.peer + 1), big * p.peer, 0.0, "exchange");
  }
}

TEST_CASE("comm::mpi: a request can be tested until done") {
  auto& c = world();
  auto x = input<fp32>(513, 77, c.rank());
  auto request = c.all_reduce(x, reduction_op::avg);
  while (!request.test()) {
  }
  CHECK(request.test());
  request.wait();  // a finished request waits for nothing, and divides only once
  expect_close<fp32>(x, reference<fp32>(513, 77, c.size(), reduction_op::avg), 0,
                     reduction_tolerance<fp32>(c.size(), reduction_op::sum), "tested avg");
}

TEST_CASE("comm::mpi: errors") {
  auto& c = world();
  check_shape_errors(c);
  // A negative tag is MPI's error (MPI_ERR_TAG), returned, not aborting.
  auto x = input<fp32>(4, 1, c.rank());
  const std::string rank = "rank " + std::to_string(c.rank());
  expect_error<fusor::comm::mpi_error>([&] { c.send(x, (c.rank() + 1) % c.size(), -5).wait(); },
                                       {"MPI_Isend", rank.c_str(), "tag"});
}
