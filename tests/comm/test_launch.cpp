// comm/launch.hpp: the rank, size and local rank each launcher's variables
// give (OpenMPI, PMI, Slurm, torchrun), which launcher wins when several are
// set, what is assumed when a local rank is missing, and the errors naming a
// bad variable. (Under mpirun, tests/comm/test_mpi.cpp checks the real ones.)
#include <map>
#include <string>

#include <doctest/doctest.h>

#include <fusor/comm/launch.hpp>

#include "support/fusor_test.hpp"

namespace {
// A launcher's variables, as launch_from reads them.
fusor::comm::launch_info launch(const std::map<std::string, std::string>& variables) {
  return fusor::comm::launch_from([&](const char* name) -> const char* {
    const auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_CASE("launch: each launcher's variables give the rank, the size and the local rank") {
  const auto none = launch({});
  CHECK(!none.found);
  CHECK(none.rank == 0);
  CHECK(none.size == 1);
  CHECK(none.launcher == "none");

  const auto ompi = launch({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  CHECK(ompi.found);
  CHECK(ompi.launcher == "OpenMPI");
  CHECK(ompi.rank == 5);
  CHECK(ompi.size == 8);
  CHECK(ompi.local_rank == 1);

  const auto pmi = launch({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"PMI_LOCAL_RANK", "3"}});
  CHECK(pmi.launcher == "PMI");
  CHECK(pmi.local_rank == 3);
  CHECK(launch({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "1"}, {"PMI_LOCAL_RANK", "3"}}).local_rank == 1);

  const auto slurm = launch({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}});
  CHECK(slurm.launcher == "Slurm");
  CHECK(slurm.rank == 9);
  CHECK(slurm.size == 16);
  CHECK(slurm.local_rank == 1);

  const auto torchrun = launch({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}});
  CHECK(torchrun.launcher == "torchrun");
  CHECK(torchrun.rank == 2);
  CHECK(torchrun.local_rank == 0);
}

TEST_CASE("launch: mpirun inside a Slurm allocation is OpenMPI's; a missing local rank is the rank") {
  const auto both = launch({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"OMPI_COMM_WORLD_RANK", "3"},
                            {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}});
  CHECK(both.launcher == "OpenMPI");
  CHECK(both.rank == 3);
  const auto no_local = launch({{"RANK", "2"}, {"WORLD_SIZE", "4"}});
  CHECK(no_local.local_rank == 2);
}

TEST_CASE("launch: a bad variable is an error naming it and its value") {
  fusor_test::expect_error<fusor::error>([] { launch({{"RANK", "two"}, {"WORLD_SIZE", "4"}}); }, {"RANK=\"two\""});
  fusor_test::expect_error<fusor::error>([] { launch({{"RANK", "4"}, {"WORLD_SIZE", "4"}}); },
                                         {"RANK=4", "not below", "WORLD_SIZE=4"});
  fusor_test::expect_error<fusor::error>([] { launch({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}); },
                                         {"SLURM_NTASKS=\"0\"", "at least 1"});
  fusor_test::expect_error<fusor::error>(
      [] { launch({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}}); },
      {"OMPI_COMM_WORLD_LOCAL_RANK=\"-1\""});
}
