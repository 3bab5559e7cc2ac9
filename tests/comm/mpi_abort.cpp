// A job in which rank 1 throws while rank 0 waits in a collective: run_ranks
// prints the error with rank 1 and aborts every rank (tests/suites/comm.cmake
// checks that mpirun ends, non-zero, within a minute).
#include <stdexcept>

#include <fusor/comm/mpi.hpp>

int main(int argc, char** argv) {
  return fusor::comm::run_ranks(argc, argv, [](fusor::comm::mpi& c) {
    if (c.rank() == 1) throw std::runtime_error("deliberate");
    float x = 1;
    fusor::view<float, fusor::dextents<fusor::index_t, 1>> v(&x, 1);
    c.all_reduce(v, fusor::comm::reduction_op::sum).wait();  // never completes: rank 1 is gone
    return 0;
  });
}
