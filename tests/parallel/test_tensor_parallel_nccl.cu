// Tensor parallelism on the GPU over fusor::comm::nccl (one rank made over
// comm::single, its stream the executor's, so the all-reduces are queued in
// stream order): the same checks as the host's, in device memory. Linked with
// tests/cuda_main.cu: without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>

#include "parallel/tensor_parallel_cases.hpp"

TEST_CASE("[cuda] parallel::tensor_parallel over comm::nccl (one GPU, one way)") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream);
    tensor_parallel_test::check_everything<1, fusor::device_space>(c, fusor::cuda_executor{stream});
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}
