// CUDA errors and graph capture (issue 12): a failure is reported once, by the
// call that failed, and never again by a later, healthy launch; a capture that
// fails leaves its stream usable and says why; which architecture a kernel's
// code was compiled for; the occupancy cache's answers. CUDA only: the host
// executor has no runtime status to leak.
#include <cstdint>
#include <stdexcept>

#include <fusor/graph/capture.hpp>

#include "support/fusor_test.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_cuda_errors {

using namespace fusor_test;

#if defined(FUSOR_TEST_CUDA)
namespace {
using vector_extents = dextents<index_t, 1>;

// y = 2x + 1 on `ex`, checked against the host: the stream and the runtime are healthy.
void expect_assignment_works(const cuda_executor& ex, std::uint32_t seed) {
  const index_t n = 4099;
  host_tensor<float, vector_extents> hx(n);
  fill_random(hx, seed);
  auto x = to_space(hx);
  space_tensor<float, vector_extents> y(n);
  poison(y);
  assign(y, x * 2.0f + 1.0f, ex);
  ex.synchronize();
  const auto hy = to_host(y);
  index_t wrong = 0;
  for (index_t i = 0; i < n; ++i) wrong += !close(hy(i), 2.0 * hx(i) + 1.0, 1e-6);
  CHECK(wrong == 0);
}

__global__ void empty_kernel() {}

// Writes its thread index into all its dynamic shared memory and one word out: it ran.
__global__ void shared_kernel(int* out) {
  extern __shared__ int words[];
  words[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) *out = words[blockDim.x - 1];
}

}  // namespace

FUSOR_TEST_CASE("gpu::code_version_at_least: this binary's code against the device it runs on") {
  int device = 0, major = 0, minor = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  CHECK(gpu::code_version_at_least(empty_kernel, 50));  // every architecture fusor is built for
  CHECK_FALSE(gpu::code_version_at_least(empty_kernel, 10 * major + minor + 1));  // newer than the device
  CHECK(cudaPeekAtLastError() == cudaSuccess);
}

FUSOR_TEST_CASE("gpu::resident_blocks: the occupancy API's answer for each launch size, not the first one cached") {
  const auto direct = [](int threads, std::size_t shared) {
    int per_sm = 0;
    FUSOR_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, empty_kernel, threads, shared));
    return gpu::multiprocessor_count() * per_sm;
  };
  const int small = gpu::resident_blocks<empty_kernel>(256, 0);
  const int large = gpu::resident_blocks<empty_kernel>(256, 40 * 1024);  // fewer fit: shared memory limits them
  CHECK(small == direct(256, 0));
  CHECK(large == direct(256, 40 * 1024));
  CHECK(large < small);
  CHECK(gpu::resident_blocks<empty_kernel>(256, 0) == small);  // asked again: the cached answer
  CHECK(gpu::resident_blocks<empty_kernel>(1024, 0) == direct(1024, 0));
}

// The kernel's dynamic shared-memory limit is shared by every host thread:
// a later call for fewer bytes must not lower it under a launch that asked
// for more (two threads, two row lengths, one kernel).
FUSOR_TEST_CASE("gpu::allow_dynamic_shared: the limit is raised, never lowered") {
  int device = 0, optin = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const std::size_t most = std::size_t(optin) - gpu::static_shared_bytes(shared_kernel);
  if (most <= 64 * 1024) {
    MESSAGE("skipped: this GPU allows a block only " << optin << " bytes of shared memory");
    return;
  }
  const auto limit = [] {
    cudaFuncAttributes attributes{};
    FUSOR_CUDA_CHECK(cudaFuncGetAttributes(&attributes, shared_kernel));
    return std::size_t(attributes.maxDynamicSharedSizeBytes);
  };
  gpu::allow_dynamic_shared(shared_kernel, most, 0);
  CHECK(limit() == most);
  gpu::allow_dynamic_shared(shared_kernel, 50 * 1024, 0);  // another caller's smaller rows
  CHECK(limit() == most);
  space_tensor<int, vector_extents> out(1);
  poison(out);
  shared_kernel<<<1, 256, most>>>(out.data());  // the first caller's launch
  FUSOR_CUDA_CHECK(cudaGetLastError());
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(to_host(out)(0) == 255);
}

FUSOR_TEST_CASE("a failed CUDA call is not blamed on the next kernel launch") {
  void* p = nullptr;
  // An impossible allocation fails and is reported by the call itself...
  CHECK_THROWS_AS(FUSOR_CUDA_CHECK(cudaMalloc(&p, std::size_t(1) << 60)), cuda_error);
  // ...also through fusor's stream-ordered pool.
  CHECK_THROWS_AS((space_tensor<float, vector_extents>(index_t(1) << 58)), allocation_error);
  // The runtime keeps no record of it for the launches that follow.
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  expect_assignment_works(cuda_executor{}, 1);
}

FUSOR_TEST_CASE("graph capture: work that throws leaves the stream usable and captures nothing") {
  created_stream s;
  const cuda_executor ex{s.stream};
  space_tensor<float, vector_extents> y(1000);
  graph::captured_step step;
  CHECK_THROWS_WITH_AS(step.capture(s.stream,
                                    [&] {
                                      assign(y, y + 1.0f, ex);
                                      throw std::runtime_error("the user's step failed");
                                    }),
                       "the user's step failed", std::runtime_error);
  CHECK_FALSE(step.captured());
  cudaStreamCaptureStatus status{};
  FUSOR_CUDA_CHECK(cudaStreamIsCapturing(s.stream, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  expect_assignment_works(ex, 2);
}

FUSOR_TEST_CASE("graph capture: a synchronisation inside the step is an error naming the call") {
  created_stream s;
  const cuda_executor ex{s.stream};
  space_tensor<float, vector_extents> y(1000);
  graph::captured_step step;
  expect_error<cuda_error>([&] { step.capture(s.stream, [&] { assign(y, y * 2.0f, ex); ex.synchronize(); }); },
                           {"cudaStreamSynchronize"});
  CHECK_FALSE(step.captured());
  expect_assignment_works(ex, 3);
}

FUSOR_TEST_CASE("graph capture: a capture the runtime refuses to end names cudaStreamEndCapture") {
  // Work forked onto a second stream and never joined back: the capture cannot
  // be ended (cudaErrorStreamCaptureUnjoined), although no call inside threw.
  created_stream s, side;
  cudaEvent_t fork{};
  FUSOR_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  space_tensor<float, vector_extents> y(1000);
  graph::captured_step step;
  expect_error<cuda_error>(
      [&] {
        step.capture(s.stream, [&] {
          FUSOR_CUDA_CHECK(cudaEventRecord(fork, s.stream));
          FUSOR_CUDA_CHECK(cudaStreamWaitEvent(side.stream, fork, 0));
          assign(y, y * 2.0f, cuda_executor{side.stream});
        });
      },
      {"cudaStreamEndCapture"});
  CHECK_FALSE(step.captured());
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  expect_assignment_works(cuda_executor{s.stream}, 4);
  expect_assignment_works(cuda_executor{side.stream}, 5);
  FUSOR_CUDA_CHECK(cudaEventDestroy(fork));
}

FUSOR_TEST_CASE("graph capture: replays run the step and repeat its host effects") {
  created_stream s;
  const cuda_executor ex{s.stream};
  const index_t n = 777;
  host_tensor<float, vector_extents> hx(n);
  fill_random(hx, 6);
  auto x = to_space(hx);
  int host_counter = 0;
  graph::captured_step step;
  step.capture(s.stream, [&] {
    assign(x, x + 1.0f, ex);
    graph::host_effect([&] { ++host_counter; });
  });
  CHECK(host_counter == 0);  // capture records; it runs nothing
  CHECK(step.host_effect_count() == 1);
  for (int i = 0; i < 5; ++i) step.replay();
  ex.synchronize();
  CHECK(host_counter == 5);
  const auto hy = to_host(x);
  index_t wrong = 0;
  for (index_t i = 0; i < n; ++i) wrong += !close(hy(i), double(hx(i)) + 5.0, 1e-6);
  CHECK(wrong == 0);
  graph::host_effect([&] { ++host_counter; });  // outside a capture: at once
  CHECK(host_counter == 6);
}
#endif

}  // namespace test_cuda_errors
