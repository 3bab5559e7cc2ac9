// fusor/comm/launch.hpp — this process's rank, the number of ranks and its
// local rank, as the launcher that started it says, before any communicator
// exists (to pick a GPU before the first CUDA call, to name log files, to run
// a program without MPI under torchrun-style launchers).
//
//   const fusor::comm::launch_info me = fusor::comm::launch_from_environment();
//   if (me.found) cudaSetDevice(me.local_rank % device_count);
//
// Launchers and their variables, in the order they are tried (the first that
// sets a rank wins):
//   OpenMPI's mpirun   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH / Hydra, PMI PMI_RANK, PMI_SIZE, MPI_LOCALRANKID (or PMI_LOCAL_RANK)
//   Slurm's srun       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//   torchrun and kin   RANK, WORLD_SIZE, LOCAL_RANK
// A variable that is set but is not a whole number in range (a rank not below
// the size, a negative local rank) is an error naming the variable and value.
// Nothing set: one process, rank 0 of 1 (found is false).
#pragma once

#include <cerrno>
#include <cstdlib>
#include <functional>
#include <string>

#include "fusor/core/error.hpp"

namespace fusor::comm {

/// This process's place in the job, as its launcher's environment variables say.
struct launch_info {
  /// This process's rank, from 0 to `size` - 1.
  int rank = 0, size = 1, local_rank = 0;  ///< Its rank among the ranks on its machine (`rank` when not given).
  /// \var size
  /// The number of ranks in the job.
  std::string launcher = "none";  ///< "OpenMPI", "PMI", "Slurm", "torchrun", or "none"
  bool found = false;  ///< Whether a launcher's variables were found (false: one process, rank 0 of 1).
};

namespace detail {
// The value of `name` as a whole number >= `least`, or `fallback` when unset.
inline int launch_number(const std::function<const char*(const char*)>& get, const char* name, int fallback,
                         int least) {
  const char* text = get(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < least || v > 1000000000L)
    throw error(std::string("fusor::comm: the launcher's ") + name + "=\"" + text + "\" is not a whole number of at least " +
                std::to_string(least));
  return static_cast<int>(v);
}
}  // namespace detail

/// The launch_info from any source of variables (`get(name)`: the value or null), so tests need
/// not touch the process's environment. Throws fusor::error for a value that is not a whole number in range.
inline launch_info launch_from(const std::function<const char*(const char*)>& get) {
  struct scheme {
    const char* launcher;
    const char* rank;
    const char* size;
    const char* local_ranks[2];
  };
  static constexpr scheme schemes[] = {
      {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr}},
      {"PMI", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_LOCALID", nullptr}},
      {"torchrun", "RANK", "WORLD_SIZE", {"LOCAL_RANK", nullptr}},
  };
  for (const scheme& s : schemes) {
    const char* rank_text = get(s.rank);
    if (rank_text == nullptr || *rank_text == '\0') continue;
    launch_info info;
    info.launcher = s.launcher;
    info.found = true;
    info.rank = detail::launch_number(get, s.rank, 0, 0);
    info.size = detail::launch_number(get, s.size, info.rank + 1, 1);
    if (info.rank >= info.size)
      throw error(std::string("fusor::comm: the launcher's ") + s.rank + "=" + std::to_string(info.rank) +
                  " is not below " + s.size + "=" + std::to_string(info.size));
    info.local_rank = -1;
    for (const char* name : s.local_ranks)
      if (name != nullptr && info.local_rank < 0) info.local_rank = detail::launch_number(get, name, -1, 0);
    if (info.local_rank < 0) info.local_rank = info.rank;  // not given: assume one machine
    return info;
  }
  return {};
}

/// The launch_info from this process's environment variables.
inline launch_info launch_from_environment() {
  return launch_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace fusor::comm
