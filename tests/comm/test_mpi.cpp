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
