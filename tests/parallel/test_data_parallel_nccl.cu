// parallel::data_parallel on one GPU over comm::nccl (made over comm::single):
// the CUDA path of a step — collectives on the communicator's stream, ordered
// against the compute stream by events, no host wait — equals optim::trainer,
// with and without ZeRO-1 and micro-batches. Linked with tests/cuda_main.cu:
// without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>

#include "parallel/data_parallel_cases.hpp"

using namespace dp_test;

TEST_CASE("data_parallel over comm::nccl (one GPU) equals optim::trainer") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream);
    check_equals_one_rank<optim::adamw>(c, optim::adamw_options{.weight_decay = 0.01f}, "AdamW");
    check_clipping(c);
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}
