// bench/cuda_timing.hpp — how every GPU benchmark times its work: warm-up runs,
// then the median of timed runs, each between two CUDA events on the stream.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include <fusor/core/cuda_runtime.hpp>

namespace fusor_bench {

#if FUSOR_CUDA_COMPILE_CHECK
// A build configured with FUSOR_CUDA_COMPILE_CHECK (CMakeLists.txt: ptxas at
// -O0, to prove the code compiles where there is no GPU) times nothing worth
// reading: on a GPU, the benchmark stops before it starts.
inline const bool refuses_compile_check_builds = [] {
  if (fusor::gpu::available()) {
    std::fprintf(stderr, "this benchmark was built with FUSOR_CUDA_COMPILE_CHECK=ON (device code at ptxas -O0): its "
                         "figures would mean nothing; configure with -DFUSOR_CUDA_COMPILE_CHECK=OFF\n");
    std::exit(1);
  }
  return true;
}();
#endif

// Median milliseconds of `work` over timed_runs runs, after warmup_runs untimed ones.
template <class Work>
double median_ms(int warmup_runs, int timed_runs, cudaStream_t stream, Work&& work) {
  cudaEvent_t start, stop;
  FUSOR_CUDA_CHECK(cudaEventCreate(&start));
  FUSOR_CUDA_CHECK(cudaEventCreate(&stop));
  for (int r = 0; r < warmup_runs; ++r) work();
  std::vector<float> times(timed_runs);
  for (float& t : times) {
    FUSOR_CUDA_CHECK(cudaEventRecord(start, stream));
    work();
    FUSOR_CUDA_CHECK(cudaEventRecord(stop, stream));
    FUSOR_CUDA_CHECK(cudaEventSynchronize(stop));
    FUSOR_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
  }
  FUSOR_CUDA_CHECK(cudaEventDestroy(start));
  FUSOR_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[timed_runs / 2];
}

}  // namespace fusor_bench
