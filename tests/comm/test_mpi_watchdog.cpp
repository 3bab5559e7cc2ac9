// The MPI communicator's watchdog (comm/mpi_watchdog.hpp) under mpirun: the
// timeout and the collective check from options and the environment, the
// messages (a call described, the ranks that did not arrive, the first rank
// that differs), collectives numbered alike on every rank, the progress board
// read back, and every collective passing the check when the ranks agree.
// The jobs that must fail (a sleeping rank, diverging calls) are
// tests/comm/mpi_faults.cpp, run by tests/suites/comm.cmake.
#include <fusor/comm/mpi.hpp>

#include "comm/collective_checks.hpp"
#include "comm/mpi_world.hpp"

using namespace comm_test;
using fusor::comm::mpi_call;
using fusor::comm::seconds_d;

TEST_CASE("comm::mpi watchdog: the timeout and the check from options, then the environment") {
  using fusor::comm::resolve_mpi_check;
  using fusor::comm::resolve_mpi_timeout;
  CHECK(resolve_mpi_timeout({}, nullptr) == seconds_d(600.0));
  CHECK(resolve_mpi_timeout({}, "2.5") == seconds_d(2.5));
  CHECK(resolve_mpi_timeout(seconds_d(7.0), "2.5") == seconds_d(7.0));
  fusor_test::expect_error<fusor::error>([] { resolve_mpi_timeout({}, "soon"); }, {"FUSOR_MPI_TIMEOUT_S", "soon"});
  fusor_test::expect_error<fusor::error>([] { resolve_mpi_timeout(seconds_d(-1.0), nullptr); }, {"-1"});
  CHECK(resolve_mpi_check({}, "1"));
  CHECK(!resolve_mpi_check({}, "0"));
  CHECK(resolve_mpi_check(true, "0"));
  fusor_test::expect_error<fusor::error>([] { resolve_mpi_check({}, "maybe"); }, {"FUSOR_MPI_CHECK_COLLECTIVES", "maybe"});
  CHECK(resolve_mpi_check({}, nullptr));  // on in every build: without it a mismatch may corrupt memory
}

TEST_CASE("comm::mpi watchdog: messages name the call, the missing ranks and both sides of a mismatch") {
  const mpi_call sum{mpi_call::all_reduce, 1024, fusor::comm::detail::element_code<float>(), 0, -1, 17};
  const mpi_call gather{mpi_call::all_gather, 512, fusor::comm::detail::element_code<fusor::bfloat16>(), -1, -1, 17};
  const mpi_call bcast{mpi_call::broadcast, 10, fusor::comm::detail::element_code<std::int32_t>(), -1, 2, 3};
  CHECK(describe(sum) == "all_reduce #17 (1024 x float, sum)");
  CHECK(describe(gather) == "all_gather #17 (512 x bfloat16)");
  CHECK(describe(bcast) == "broadcast #3 (10 x int32, root 2)");
  CHECK(fusor::comm::mismatch_message({sum, sum, sum}).empty());
  const std::string m = fusor::comm::mismatch_message({sum, sum, gather, sum});
  CHECK(m.find("rank 0 calls all_reduce #17 (1024 x float, sum), rank 2 calls all_gather #17 (512 x bfloat16)") !=
        std::string::npos);
  CHECK(fusor::comm::missing_ranks({5, 4, 5, -1}, 5) ==
        "ranks that did not arrive: 1 (last entered #4); ranks that did not answer: 3");
  CHECK(fusor::comm::missing_ranks({5, 6}, 5) == "every rank arrived (the collective itself is stuck)");
}

TEST_CASE("comm::mpi watchdog: every collective passes the check when the ranks agree, numbered alike on every rank") {
  auto& c = world();
  INFO("rank ", c.rank(), " of ", c.size());
  fusor::comm::mpi fresh(MPI_COMM_WORLD, {.timeout = seconds_d(30.0), .check_collectives = true});
  CHECK(fresh.timeout() == seconds_d(30.0));
  CHECK(fresh.checks_collectives());
  CHECK(fresh.collectives_started() == 0);
  // Every collective, checked against the other ranks' (they agree: nothing throws).
  check_collectives<fp32>(fresh);
  const std::int64_t started = fresh.collectives_started();
  CHECK(started > 5);
  // Every rank numbered as many.
  std::int64_t most = started, least = started;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  CHECK(most == started);
  CHECK(least == started);
}
