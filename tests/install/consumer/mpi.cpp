// A plain C++ program linking fusor::mpi (MPI) as a user would, run as a
// single MPI process (no mpirun): run_ranks starts MPI, an average over one rank
// leaves the values as they are. Exits non-zero when anything is wrong.
#include <cstdio>

#include <fusor/comm/mpi.hpp>

int main(int argc, char** argv) {
  return fusor::comm::run_ranks(argc, argv, [](fusor::comm::mpi& c) {
    float x[3] = {1.5f, -2.0f, 3.25f}, y[3] = {0, 0, 0};
    fusor::view<float, fusor::dextents<fusor::index_t, 1>> send(x, 3), recv(y, 3);
    c.all_reduce(send, recv, fusor::comm::reduction_op::avg).wait();
    int wrong = c.size() != 1;
    for (int i = 0; i < 3; ++i) wrong += y[i] != x[i];
    std::printf("consumer_mpi: %d ranks, %s\n", c.size(), wrong ? "WRONG" : "ok");
    return wrong ? 1 : 0;
  });
}
