// A job in which rank 1 throws while rank 0 waits in a collective; every rank
// must end (tests/suites/comm.cmake checks that mpirun ends, non-zero, within a
// minute, naming rank 1). Without arguments: run_ranks prints the error and
// aborts. With "environment": the documented pattern without run_ranks — the
// mpi_environment, destroyed while the exception unwinds, aborts.
#include <cstring>
#include <stdexcept>

#include <fusor/comm/mpi.hpp>

namespace {
int wait_for_rank_1(fusor::comm::mpi& c) {
  if (c.rank() == 1) throw std::runtime_error("deliberate");
  float x = 1;
  fusor::view<float, fusor::dextents<fusor::index_t, 1>> v(&x, 1);
  c.all_reduce(v, fusor::comm::reduction_op::sum).wait();  // never completes: rank 1 is gone
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "environment") == 0) {
    try {
      fusor::comm::mpi_environment environment(argc, argv);
      fusor::comm::mpi c;
      return wait_for_rank_1(c);
    } catch (const std::exception&) {
      return 2;  // not reached: the environment aborted the job
    }
  }
  return fusor::comm::run_ranks(argc, argv, wait_for_rank_1);
}
