// fusor/kernels/matmul_cublaslt_plan.hpp — what a cuBLASLt matmul is planned
// with: the descriptors and the algorithm cublasLtMatmulAlgoGetHeuristic picks,
// told each pointer's real alignment (so misaligned operands get the kernels
// that handle them, or a clear error), cached per (device, shape, types,
// layouts, epilogue, alignments); one cuBLASLt handle per device, created once;
// the workspace limit per device (32 MiB from Hopper on, 4 MiB before, as
// NVIDIA recommends).
//
// When the heuristics offer nothing for an epilogue with a bias gradient
// (BGRADA/BGRADB, DRELU_BGRAD, DGELU_BGRAD), the plan is made for the epilogue
// without it and says so (separate_bias_gradient): the caller sums the bias
// gradient apart (kernels/matmul_bias_gradient.hpp). Any other epilogue, or a
// product that has no algorithm at all, is a cuda_error naming the shape,
// types, layouts, alignments and the epilogues tried.
// Only translation units compiled by nvcc see this header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"

namespace fusor::gpu {
/// Throws cuda_error naming the cuBLAS(Lt) call, file, line and status.
FUSOR_CUDA_DECL void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
}  // namespace fusor::gpu
#define FUSOR_CUBLAS_CHECK(call) ::fusor::gpu::check_cublas((call), #call, __FILE__, __LINE__)

namespace fusor::detail {

// The epilogue without its bias-gradient part (itself when it has none).
constexpr cublasLtEpilogue_t without_bias_gradient(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB: return CUBLASLT_EPILOGUE_DEFAULT;
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return CUBLASLT_EPILOGUE_DRELU;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU;
    default: return e;
  }
}

FUSOR_CUDA_DECL const char* epilogue_name(cublasLtEpilogue_t e);
FUSOR_CUDA_DECL const char* data_type_name(int t);
FUSOR_CUDA_DECL const char* compute_type_name(int c);

// Everything the algorithm and descriptors depend on; pointers only through their alignment.
struct cublaslt_key {
  int device = 0, compute = 0, ab_type = 0, cd_type = 0;
  bool transpose_a = false, transpose_b = false, swapped = false;
  index_t m = 0, n = 0, k = 0, batch = 0, lda = 0, ldb = 0, ldd = 0, stride_a = 0, stride_b = 0, stride_d = 0;
  unsigned epilogue = 0;               // as fusor asks for it
  bool separate_bias_gradient = false;  // forced by the test hook: plan without the bias gradient
  index_t aux_ld = 0, aux_batch_stride = 0;
  unsigned align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;
  auto operator<=>(const cublaslt_key&) const = default;
};

// Descriptors and algorithm of one cached configuration. The bias and aux
// pointers are set on `desc` per call, under `mutex`, just before the call.
struct cublaslt_plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  bool uses_bias_pointer = false, uses_aux_pointer = false;
  bool separate_bias_gradient = false;  // the caller sums the bias gradient apart
  std::mutex mutex;
  cublaslt_plan() = default;
  cublaslt_plan(const cublaslt_plan&) = delete;
  cublaslt_plan& operator=(const cublaslt_plan&) = delete;
  ~cublaslt_plan() {  // statuses ignored: nothing to do about a failed destroy
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
  }
};

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  FUSOR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}
template <class T>
void set_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
  FUSOR_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

FUSOR_CUDA_DECL cublasLtMatrixLayout_t make_layout(cudaDataType_t type, index_t rows, index_t cols, index_t ld,
                                                   index_t batch, index_t batch_stride);

// The problem as cuBLASLt sees it, for errors.
FUSOR_CUDA_DECL std::string describe(const cublaslt_key& k, std::size_t workspace_limit);

// One attempt: descriptors for `epilogue` (bias and aux pointers set: the
// heuristics read their alignment) and the heuristics' best algorithm. False,
// with the status, when they offer none.
FUSOR_CUDA_DECL bool try_plan(cublasLtHandle_t handle, const cublaslt_key& key, cublasLtEpilogue_t epilogue,
                              cublasComputeType_t compute, cudaDataType_t scale_type, const void* bias, const void* aux,
                              std::size_t workspace_limit, cublaslt_plan& plan, std::string& status_name);

// The plan for `key`: its epilogue, or (bias-gradient epilogues) the epilogue
// without the bias gradient, when the heuristics offer nothing or the test hook
// asks for it. Throws cuda_error naming the problem when neither works.
FUSOR_CUDA_DECL std::unique_ptr<cublaslt_plan> make_plan(cublasLtHandle_t handle, const cublaslt_key& key,
                                                         cublasComputeType_t compute, cudaDataType_t scale_type,
                                                         const void* bias, const void* aux, std::size_t workspace_limit);

// Handles, workspace limits and plans, behind one lock (held for lookups and
// for making a plan, not while a matmul runs). Never destroyed: the CUDA
// runtime may be gone by the time static destructors run.
struct cublaslt_state {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<int, std::size_t> workspace_limits;
  std::map<cublaslt_key, std::unique_ptr<cublaslt_plan>> plans;
};
FUSOR_CUDA_DECL cublaslt_state& cublaslt();

// How many configurations are cached (for tests of the cache).
FUSOR_CUDA_DECL std::size_t cublaslt_cached_plans();

// What a call needs: the device's handle and workspace limit, and the plan.
struct cublaslt_context {
  cublasLtHandle_t handle = nullptr;
  cublaslt_plan* plan = nullptr;  // owned by the cache, never freed
  std::size_t workspace_limit = 0;
};

// The handle of key.device (the current device) and the plan for `key`, each
// made on first use.
FUSOR_CUDA_DECL cublaslt_context cublaslt_context_for(const cublaslt_key& key, cublasComputeType_t compute,
                                                      cudaDataType_t scale_type, const void* bias, const void* aux);

}  // namespace fusor::detail
#if !FUSOR_CUDA_PRECOMPILED
#include "fusor/kernels/impl/matmul_cublaslt_plan.ipp"
#endif
#endif  // FUSOR_HAS_CUDA
