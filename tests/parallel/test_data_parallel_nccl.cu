// parallel::data_parallel on one GPU over comm::nccl (made over comm::single):
// the CUDA path of a step — collectives on the communicator's stream, ordered
// against the compute stream by events, no host wait — equals optim::trainer,
// with and without ZeRO-1 and micro-batches; PowerSGD against its reference. Linked with tests/cuda_main.cu:
// without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>
#include <fusor/graph/capture.hpp>

#include "parallel/data_parallel_cases.hpp"
#include "parallel/powersgd_cases.hpp"

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

// PowerSGD on the GPU: the factors' matmuls (cuBLASLt), the Gram-Schmidt
// kernel and the packed collectives on the communicator's stream.
TEST_CASE("PowerSGD over comm::nccl (one GPU): the algorithm in double, and data_parallel with it") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream);
    check_powersgd_against_reference(c);
    check_powersgd_training(c);
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}

// A data-parallel step polls its collectives (cudaEventQuery), which a graph
// cannot record: capture is refused with an error that says so, and the stream
// stays usable for eager steps.
TEST_CASE("data_parallel over comm::nccl: capturing a step in a CUDA graph is refused, naming why") {
  cudaStream_t stream, compute;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream);
    network_t net(global_batch, {.seed = seed, .stream = compute});
    optim::trainer_options t = trainer_options();
    t.stream = compute;
    parallel::data_parallel<network_t, optim::adamw, fusor::comm::nccl> train(net, c, t, optim::adamw_options{}, {});
    const executor ex{compute};
    train.initialize(ex);
    const batch b = make_batch(0);
    train.step(b.images, b.labels, ex);  // eager: fine
    fusor::graph::captured_step captured;
    expect_error<fusor::error>([&] { captured.capture(compute, [&] { train.step(b.images, b.labels, ex); }); },
                               {"data_parallel::step", "cannot be captured in a CUDA graph"});
    CHECK_FALSE(captured.captured());
    train.step(b.images, b.labels, ex);  // and eager steps go on
    FUSOR_CUDA_CHECK(cudaStreamSynchronize(compute));
    CHECK(train.steps_taken() == 2);
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(compute));
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}
