// fusor/kernels/impl/matmul_cublaslt_plan.ipp — definitions of
// fusor/kernels/matmul_cublaslt_plan.hpp's functions: inline in the header
// (header-only use), or compiled once in fusor_cuda_runtime (src/cuda/kernels.cu;
// see FUSOR_CUDA_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/kernels/matmul_cublaslt_plan.hpp"

namespace fusor::gpu {
FUSOR_CUDA_DECL void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(std::string("fusor: cuBLASLt call ") + call + " failed at " + file + ":" + std::to_string(line) +
                     ": " + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")");
}
}  // namespace fusor::gpu

namespace fusor::detail {

FUSOR_CUDA_DECL const char* epilogue_name(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_RELU: return "RELU";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX: return "RELU_AUX";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_GELU: return "GELU";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "(other)";
  }
}

FUSOR_CUDA_DECL const char* data_type_name(int t) {
  switch (t) {
    case CUDA_R_32F: return "fp32";
    case CUDA_R_64F: return "fp64";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_16F: return "fp16";
    default: return "(other)";
  }
}

FUSOR_CUDA_DECL const char* compute_type_name(int c) {
  switch (c) {
    case CUBLAS_COMPUTE_32F: return "COMPUTE_32F";
    case CUBLAS_COMPUTE_32F_FAST_TF32: return "COMPUTE_32F_FAST_TF32";
    case CUBLAS_COMPUTE_16F: return "COMPUTE_16F";
    case CUBLAS_COMPUTE_64F: return "COMPUTE_64F";
    default: return "(other)";
  }
}

FUSOR_CUDA_DECL cublasLtMatrixLayout_t make_layout(cudaDataType_t type, index_t rows, index_t cols, index_t ld, index_t batch,
                                          index_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  FUSOR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, std::uint64_t(rows), std::uint64_t(cols), std::int64_t(ld)));
  if (batch > 1) {
    set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, std::int32_t(batch));
    set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, std::int64_t(batch_stride));
  }
  return layout;
}

FUSOR_CUDA_DECL std::string describe(const cublaslt_key& k, std::size_t workspace_limit) {
  const auto s = [](auto v) { return std::to_string(v); };
  const auto operand = [&](const char* name, int type, bool transposed, index_t ld, index_t stride) {
    return std::string(name) + " " + data_type_name(type) + (transposed ? " transposed" : "") + ", ld " + s(ld) +
           (k.batch > 1 ? ", batch stride " + s(stride) : std::string());
  };
  std::string d = "D [" + s(k.m) + ", " + s(k.n) + "] = op(A) op(B), k " + s(k.k) + ", batch " + s(k.batch) +
                  (k.swapped ? " (D is fusor's c transposed: A is fusor's b, B fusor's a)" : " (D is fusor's c)") + "; " +
                  operand("A", k.ab_type, k.transpose_a, k.lda, k.stride_a) + "; " +
                  operand("B", k.ab_type, k.transpose_b, k.ldb, k.stride_b) + "; " +
                  operand("C/D", k.cd_type, false, k.ldd, k.stride_d) + "; " + compute_type_name(k.compute);
  if (k.align_aux) d += "; auxiliary ld " + s(k.aux_ld) + (k.batch > 1 ? ", batch stride " + s(k.aux_batch_stride) : "");
  d += "; pointer alignments (bytes) A " + s(k.align_a) + ", B " + s(k.align_b) + ", D " + s(k.align_d);
  if (k.align_bias) d += ", bias " + s(k.align_bias);
  if (k.align_aux) d += ", auxiliary " + s(k.align_aux);
  return d + "; workspace limit " + s(workspace_limit >> 20) + " MiB; device " + s(k.device);
}

FUSOR_CUDA_DECL bool try_plan(cublasLtHandle_t handle, const cublaslt_key& key, cublasLtEpilogue_t epilogue,
                     cublasComputeType_t compute, cudaDataType_t scale_type, const void* bias, const void* aux,
                     std::size_t workspace_limit, cublaslt_plan& plan, std::string& status_name) {
  FUSOR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, scale_type));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, std::int32_t(key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, std::int32_t(key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(epilogue));
  if (bias) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) {
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t(key.aux_ld));
    if (key.batch > 1)
      set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, std::int64_t(key.aux_batch_stride));
  }
  plan.uses_bias_pointer = bias != nullptr;
  plan.uses_aux_pointer = aux != nullptr;
  const auto ab = static_cast<cudaDataType_t>(key.ab_type), cd = static_cast<cudaDataType_t>(key.cd_type);
  plan.a = key.transpose_a ? make_layout(ab, key.k, key.m, key.lda, key.batch, key.stride_a)
                           : make_layout(ab, key.m, key.k, key.lda, key.batch, key.stride_a);
  plan.b = key.transpose_b ? make_layout(ab, key.n, key.k, key.ldb, key.batch, key.stride_b)
                           : make_layout(ab, key.k, key.n, key.ldb, key.batch, key.stride_b);
  plan.d = make_layout(cd, key.m, key.n, key.ldd, key.batch, key.stride_d);

  cublasLtMatmulPreference_t preference = nullptr;
  FUSOR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  struct destroy_preference {
    cublasLtMatmulPreference_t p;
    ~destroy_preference() { (void)cublasLtMatmulPreferenceDestroy(p); }
  } guard{preference};
  const auto set_preference = [&](cublasLtMatmulPreferenceAttributes_t attribute, auto value) {
    FUSOR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
  };
  set_preference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t(workspace_limit));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, std::uint32_t(key.align_a));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, std::uint32_t(key.align_b));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, std::uint32_t(key.align_d));
  set_preference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, std::uint32_t(key.align_d));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d, preference, 1, &result, &found);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan.algo = result.algo;
    plan.workspace = result.workspaceSize;
    return true;
  }
  // "Not supported" (or an epilogue's unmet rule, "invalid value"): no algorithm.
  if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_INVALID_VALUE)
    FUSOR_CUBLAS_CHECK(status);
  status_name = status == CUBLAS_STATUS_SUCCESS ? "no algorithm returned" : cublasLtGetStatusName(status);
  return false;
}

FUSOR_CUDA_DECL std::unique_ptr<cublaslt_plan> make_plan(cublasLtHandle_t handle, const cublaslt_key& key,
                                                cublasComputeType_t compute, cudaDataType_t scale_type,
                                                const void* bias, const void* aux, std::size_t workspace_limit) {
  const auto requested = static_cast<cublasLtEpilogue_t>(key.epilogue);
  const cublasLtEpilogue_t reduced = without_bias_gradient(requested);
  std::string tried, status;
  if (!key.separate_bias_gradient) {
    auto plan = std::make_unique<cublaslt_plan>();
    if (try_plan(handle, key, requested, compute, scale_type, bias, aux, workspace_limit, *plan, status)) return plan;
    tried = std::string("epilogue ") + epilogue_name(requested) + " (" + status + ")";
  }
  if (reduced != requested) {
    auto plan = std::make_unique<cublaslt_plan>();
    if (try_plan(handle, key, reduced, compute, scale_type, nullptr, aux, workspace_limit, *plan, status)) {
      plan->separate_bias_gradient = true;
      return plan;
    }
    tried += std::string(tried.empty() ? "" : ", then ") + "epilogue " + epilogue_name(reduced) + " (" + status +
             ") with the bias gradient summed apart";
  }
  throw cuda_error("fusor: cuBLASLt has no algorithm for this matmul: " + describe(key, workspace_limit) + "; tried " +
                   tried +
                   ". Tensor-core kernels need 16-byte aligned pointers and leading dimensions (a multiple of 8 "
                   "elements for bf16/fp16), and epilogues have their own rules: copy misaligned operands into "
                   "fresh tensors, pad the rows, or run the epilogue as a separate pass (epilogue::expression)");
}

FUSOR_CUDA_DECL cublaslt_state& cublaslt() {
  static cublaslt_state* state = new cublaslt_state;
  return *state;
}

FUSOR_CUDA_DECL std::size_t cublaslt_cached_plans() {
  std::lock_guard lock(cublaslt().mutex);
  return cublaslt().plans.size();
}

FUSOR_CUDA_DECL cublaslt_context cublaslt_context_for(const cublaslt_key& key, cublasComputeType_t compute,
                                             cudaDataType_t scale_type, const void* bias, const void* aux) {
  // A thread's matmuls repeat: the last key it asked for answers without the
  // lock and the map (plans and handles are never freed).
  thread_local cublaslt_key last_key;
  thread_local cublaslt_context last_context;
  if (last_context.plan && key == last_key) return last_context;
  cublaslt_state& state = cublaslt();
  std::lock_guard lock(state.mutex);
  auto handle_at = state.handles.find(key.device);
  if (handle_at == state.handles.end()) {
    cublasLtHandle_t handle = nullptr;
    FUSOR_CUBLAS_CHECK(cublasLtCreate(&handle));
    int major = 0;
    FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, key.device));
    state.workspace_limits[key.device] = std::size_t(major >= 9 ? 32 : 4) << 20;
    handle_at = state.handles.emplace(key.device, handle).first;
  }
  const std::size_t limit = state.workspace_limits[key.device];
  auto plan_at = state.plans.find(key);
  if (plan_at == state.plans.end())
    plan_at = state.plans.emplace(key, make_plan(handle_at->second, key, compute, scale_type, bias, aux, limit)).first;
  last_key = key;
  last_context = {handle_at->second, plan_at->second.get(), limit};
  return last_context;
}

}  // namespace fusor::detail
