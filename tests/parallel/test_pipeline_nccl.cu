// The pipeline's CUDA path: one stage over comm::nccl (made over comm::single)
// on one GPU, device memory, the cuda executor on the communicator's stream;
// trains as optim::trainer does, for both schedules. NCCL refuses two ranks on
// one GPU, so more stages need more GPUs. Linked with tests/cuda_main.cu:
// without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>
#include <fusor/graph/capture.hpp>

#include "parallel/pipeline_checks.hpp"

using namespace pipeline_test;

TEST_CASE("pipeline (comm::nccl, one GPU): trains as optim::trainer does; report; errors") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    auto gpus = fusor::comm::nccl::over(fusor::comm::single{}, stream);
    const executor ex{stream};
    check_training_cases(gpus, ex);
    check_report(gpus, ex);
    check_startup_errors(gpus, ex);
    // The executor must run where the messages are ordered.
    expect_error<fusor::error>(
        [&] {
          mlp_pipeline<fusor::comm::nccl> pipe(gpus, global_batch, {.seed = seed, .stream = stream}, {.stream = stream},
                                               optim::adamw_options{});
          const batch_data b = random_batch(3);
          const auto images = to_space(b.images);
          const auto labels = to_space(b.labels);
          pipe.step(images, labels, executor{});
        },
        {"communicator's stream"});
    // Its messages are polled (cudaEventQuery): capture is refused, naming why.
    {
      mlp_pipeline<fusor::comm::nccl> pipe(gpus, global_batch, {.seed = seed, .stream = stream}, {.stream = stream},
                                           optim::adamw_options{});
      const batch_data b = random_batch(4);
      const auto images = to_space(b.images);
      const auto labels = to_space(b.labels);
      pipe.step(images, labels, ex);
      fusor::graph::captured_step captured;
      expect_error<fusor::error>([&] { captured.capture(stream, [&] { pipe.step(images, labels, ex); }); },
                                 {"pipeline::step", "cannot be captured in a CUDA graph"});
      pipe.step(images, labels, ex);
      FUSOR_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}
