// The GPU's own mma.m16n8k16 and ldmatrix through device_simt
// (kernels/warp_mma.hpp), in the one-warp probe the host test runs under the
// SIMT emulator (warp_mma_probe.hpp): each ldmatrix register must equal the
// PTX ISA's fragment formula and both products A B + 0.5 exactly, in bf16 and
// fp16. Where the flash attention kernels disagree with their emulated runs,
// this says whether the instructions' layouts or the kernels are at fault.
// Needs sm_80 (says "skipped" on older GPUs).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include <fusor/core/cuda_runtime.hpp>

#include "kernels/warp_mma_probe.hpp"
#include "support/fusor_test.hpp"

namespace {

template <class T>
__global__ void warp_mma_probe_kernel(const float* a, const float* b, warp_mma_probe::results* out) {
  __shared__ __align__(16) unsigned char shared[warp_mma_probe::shared_bytes<T>];
  warp_mma_probe::run<fusor::detail::device_simt, T>(a, b, shared, *out);
}

template <class T>
void check_on_gpu(const char* precision) {
  if (!fusor::gpu::code_version_at_least(warp_mma_probe_kernel<T>, 80)) {
    MESSAGE("skipped: mma.m16n8k16 and ldmatrix need sm_80 code on an sm_80 or newer GPU");
    return;
  }
  const std::vector<float> a = warp_mma_probe::random_exact_matrix(16 * 16, 1),
                           b = warp_mma_probe::random_exact_matrix(16 * 8, 2);
  warp_mma_probe::results r = warp_mma_probe::poisoned_results();
  float *da = nullptr, *db = nullptr;
  warp_mma_probe::results* dr = nullptr;
  FUSOR_CUDA_CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
  FUSOR_CUDA_CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
  FUSOR_CUDA_CHECK(cudaMalloc(&dr, sizeof(r)));
  FUSOR_CUDA_CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  FUSOR_CUDA_CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  FUSOR_CUDA_CHECK(cudaMemcpy(dr, &r, sizeof(r), cudaMemcpyHostToDevice));
  warp_mma_probe_kernel<T><<<1, 32>>>(da, db, dr);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  FUSOR_CUDA_CHECK(cudaMemcpy(&r, dr, sizeof(r), cudaMemcpyDeviceToHost));
  FUSOR_CUDA_CHECK(cudaFree(da));
  FUSOR_CUDA_CHECK(cudaFree(db));
  FUSOR_CUDA_CHECK(cudaFree(dr));
  warp_mma_probe::check(a, b, r, std::string("GPU ") + precision);
}

}  // namespace

FUSOR_TEST_CASE("device_simt: the GPU's mma and ldmatrix fragments match the PTX formula and the emulator") {
  check_on_gpu<fusor::bfloat16>("bf16");
  check_on_gpu<fusor::float16>("fp16");
}
