// Tensor parallelism under mpirun -np 2 and -np 4 (fusor::comm::mpi, host
// memory): the split MLP equals the unsplit one in forward and backward (fp32
// and bf16), its initial parameters are the unsplit network's slices, AdamW
// training follows unsplit training, a block communicates once each way, and
// bad configurations are errors. Linked with tests/comm/mpi_main.cpp (every
// rank runs every case; the exit status is the worst over ranks).
#include <fusor/comm/mpi.hpp>

#include "comm/mpi_world.hpp"
#include "parallel/tensor_parallel_cases.hpp"

TEST_CASE("parallel::tensor_parallel over MPI") {
  auto& c = comm_test::world();
  fusor::parallel::dispatch_tensor_parallel<2, 4>(c.size(), {128}, [&]<int Ways>() {
    tensor_parallel_test::check_everything<Ways, fusor::host_space>(c, fusor::host_executor{});
  });
}
