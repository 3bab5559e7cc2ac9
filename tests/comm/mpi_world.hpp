// tests/comm/mpi_world.hpp — the communicator the MPI test binary's main makes for its tests.
#pragma once

#include <fusor/comm/mpi.hpp>

namespace comm_test {
fusor::comm::mpi& world();
}
