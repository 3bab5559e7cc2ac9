// fusor/comm/mpi_error.hpp — the error a failed MPI call becomes: mpi_error,
// naming the call, the rank and MPI's own message.
#pragma once

#include <string>

#include "fusor/comm/mpi_types.hpp"
#include "fusor/core/error.hpp"

namespace fusor::comm {

/// A failed MPI call; the message names the call, the rank and MPI's own message.
struct mpi_error : error {
  using error::error;
};
/// The ranks are about to call different collectives, or the same one with different sizes, or a message is not
/// the size of its recv (comm/mpi_watchdog.hpp's collective check).
struct mpi_mismatch_error : mpi_error {
  using mpi_error::mpi_error;
};

namespace detail {
inline int world_rank() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
inline void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, message, &length) != MPI_SUCCESS) length = 0;
  throw mpi_error(std::string("fusor::comm::mpi: ") + call + " failed on rank " + std::to_string(world_rank()) +
                  ": " + std::string(message, static_cast<std::size_t>(length)));
}
}  // namespace detail

}  // namespace fusor::comm
