// tests/gpu_check/initcheck_probe.cu — does compute-sanitizer's initcheck see
// the writes of cuBLAS's GEMM kernels on this GPU and toolkit?
//
// A and B are filled from the host; D is written by one cublasGemmEx and
// nothing else, then copied to the host. Under initcheck, that copy is reported
// as a read of uninitialised memory exactly when initcheck missed the GEMM's
// writes (seen on an H200 with CUDA 13.0: bench/RESULTS.md, third GPU run).
// gpu_check.sh runs it under initcheck before the tests, so that reports
// downstream of a cuBLAS GEMM are read for what they are. The program itself
// checks D's values and exits 1 when they are wrong.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <vector>

#define PROBE_CHECK(call)                                                            \
  do {                                                                               \
    if (const int status = int(call); status != 0) {                                 \
      std::fprintf(stderr, "initcheck_probe: %s failed (%d)\n", #call, status);      \
      return false;                                                                  \
    }                                                                                \
  } while (0)

template <class T>
bool gemm_then_copy(int m, int n, int k, cudaDataType type, cublasComputeType_t compute, const char* name) {
  std::vector<T> a(std::size_t(m) * k, T(0.5f)), b(std::size_t(k) * n, T(0.25f)), d(std::size_t(m) * n);
  T *da = nullptr, *db = nullptr, *dd = nullptr;
  PROBE_CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&db, b.size() * sizeof(T)));
  PROBE_CHECK(cudaMalloc(&dd, d.size() * sizeof(T)));
  PROBE_CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
  cublasHandle_t handle{};
  PROBE_CHECK(cublasCreate(&handle));
  const float one = 1, zero = 0;
  // Row-major D = A B as column-major D^T = B^T A^T.
  PROBE_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, db, type, n, da, type, k, &zero, dd, type,
                           n, compute, CUBLAS_GEMM_DEFAULT));
  PROBE_CHECK(cudaDeviceSynchronize());
  std::printf("initcheck_probe: %s %dx%dx%d GEMM done; copying D, which only the GEMM wrote\n", name, m, n, k);
  std::fflush(stdout);
  PROBE_CHECK(cudaMemcpy(d.data(), dd, d.size() * sizeof(T), cudaMemcpyDeviceToHost));
  cublasDestroy(handle);
  cudaFree(da), cudaFree(db), cudaFree(dd);
  const float want = 0.125f * float(k);
  for (const T& v : d)
    if (std::fabs(float(v) - want) > 1e-3f * want) {
      std::fprintf(stderr, "initcheck_probe: %s: D holds %g, expected %g\n", name, double(float(v)), double(want));
      return false;
    }
  return true;
}

int main() {
  bool ok = gemm_then_copy<__nv_bfloat16>(32, 24, 16, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16");
  ok = gemm_then_copy<__nv_bfloat16>(2048, 2048, 2048, CUDA_R_16BF, CUBLAS_COMPUTE_32F, "bf16") && ok;
  ok = gemm_then_copy<float>(32, 24, 16, CUDA_R_32F, CUBLAS_COMPUTE_32F, "fp32") && ok;
  return ok ? 0 : 1;
}
