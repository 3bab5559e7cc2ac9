// Jobs in which one rank goes wrong, run by tests/comm/expect_job_failure.sh
// (tests/suites/comm.cmake); every rank must end, non-zero, with an error that
// names the problem, within the timeout plus 10 seconds. argv[1]:
//   sleep     the last rank sleeps forever before collective #2 (an all_reduce):
//             the others time out (FUSOR_MPI_TIMEOUT_S) naming all_reduce #2 and
//             the last rank as the one that did not arrive
//   exit      the last rank exits (status 0, without MPI_Finalize) before #2
//   split     in a communicator split from the world (ranks 2 and 3), rank 3
//             sleeps before its all_reduce #1: rank 2 names rank 1 (world rank 3)
//   other     rank 1 calls all_gather where the others call all_reduce, and
//   size      rank 1 all-reduces 512 elements where the others reduce 1024:
//             the collective check (FUSOR_MPI_CHECK_COLLECTIVES=1) names both;
//             without it rank 1's all_reduce fails (MPI_ERR_TRUNCATE), naming
//             the call and the likely cause (rank 1's vector holds 1024 floats:
//             Open MPI writes all of the longer message before it reports that)
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fusor/comm/mpi.hpp>

namespace {
using flat = fusor::view<float, fusor::dextents<fusor::index_t, 1>>;

int run(fusor::comm::mpi& c, const std::string& fault) {
  std::vector<float> x(1024, 1.0f);
  c.all_reduce(flat(x.data(), 1024), fusor::comm::reduction_op::sum).wait();  // #1: every rank
  const bool last = c.rank() == c.size() - 1;
  if (fault == "sleep" && last)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (fault == "exit" && last) std::_Exit(0);
  if (fault == "split") {
    fusor::comm::mpi pair = c.split(c.rank() / 2, c.rank());
    if (c.rank() == 3)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    pair.all_reduce(flat(x.data(), 1024), fusor::comm::reduction_op::sum).wait();
    return 0;
  }
  if (fault == "other" && c.rank() == 1) {
    std::vector<float> all(1024 * std::size_t(c.size()));
    c.all_gather(flat(x.data(), 1024), flat(all.data(), fusor::index_t(all.size()))).wait();
    return 0;
  }
  const fusor::index_t n = fault == "size" && c.rank() == 1 ? 512 : 1024;
  c.all_reduce(flat(x.data(), n), fusor::comm::reduction_op::sum).wait();  // #2
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string fault = argc > 1 ? argv[1] : "";
  if (fault != "sleep" && fault != "exit" && fault != "split" && fault != "other" && fault != "size") {
    std::fprintf(stderr, "usage: %s sleep|exit|split|other|size (under mpirun)\n", argv[0]);
    return 2;
  }
  return fusor::comm::run_ranks(argc, argv, [&](fusor::comm::mpi& c) { return run(c, fault); });
}
