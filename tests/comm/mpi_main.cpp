// The MPI test binary's entry point: every rank runs every test case, in the same
// order (the collectives inside must match), under fusor::comm::run_ranks. Rank 0
// prints doctest's full report, the others only their failures (each prefixed
// by doctest with the file and line; the rank is in the check's message). The
// exit status is the worst over ranks, so mpirun, and ctest, fail if any rank fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "comm/mpi_world.hpp"

namespace {
fusor::comm::mpi* the_world = nullptr;
}

fusor::comm::mpi& comm_test::world() { return *the_world; }

int main(int argc, char** argv) {
  return fusor::comm::run_ranks(argc, argv, [&](fusor::comm::mpi& c) {
    the_world = &c;
    doctest::Context context(argc, argv);
    if (c.rank() != 0) context.setOption("minimal", true);
    int failed = context.run() != 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, c.native());
    if (c.rank() == 0 && any_failed && !failed) std::fprintf(stderr, "fusor: another rank failed (see its report)\n");
    the_world = nullptr;
    return any_failed;
  });
}
