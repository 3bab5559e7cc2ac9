// The CUDA test binary's entry point. Without a GPU nothing here can run: it
// says so and exits with 77, which CTest reports as skipped, never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include <fusor/core/cuda_runtime.hpp>

int main(int argc, char** argv) {
  if (!fusor::gpu::available()) {
    std::printf("skipped: no GPU (the CUDA tests were compiled but cannot run here)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
