// fusor/kernels/matmul_cublaslt.hpp — matmul under the CUDA executor: one
// cublasLtMatmul call with the epilogue fused, on the executor's stream.
//
// The precision policy picks the compute type: fp32 exact (COMPUTE_32F), tf32
// tensor cores when an operand's policy says so (COMPUTE_32F_FAST_TF32),
// bf16/fp16 inputs with fp32 accumulation (COMPUTE_32F), fp16 accumulation
// when asked for (COMPUTE_16F), fp64 (COMPUTE_64F). The algorithm comes from
// cublasLtMatmulAlgoGetHeuristic, told each pointer's real alignment (so
// misaligned operands get the kernels that handle them, or a clear error),
// and is cached with its descriptors per (device, shape, types, layouts,
// epilogue, alignments). One handle per device, created once. The workspace
// comes from the stream-ordered pool: 32 MiB allowed on Hopper (compute
// capability 9.x), 4 MiB elsewhere, allocated at the size the algorithm needs.
// No host synchronisation. A cuBLASLt matmul counts as one launch in
// fusor::cuda::launch_counter(); an expression epilogue adds its own pass.
// Only translation units compiled by nvcc see this header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "fusor/core/buffer.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/matmul_epilogue.hpp"
#include "fusor/kernels/matmul_layout.hpp"

namespace fusor::cuda {
// Throws cuda_error naming the cuBLAS(Lt) call, file, line and status.
inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cuda_error(std::string("fusor: cuBLASLt call ") + call + " failed at " + file + ":" + std::to_string(line) +
                     ": " + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")");
}
}  // namespace fusor::cuda
#define FUSOR_CUBLAS_CHECK(call) ::fusor::cuda::check_cublas((call), #call, __FILE__, __LINE__)

namespace fusor::detail {

template <class T>
constexpr cudaDataType_t cuda_data_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  else if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  else if constexpr (std::is_same_v<T, bfloat16>) return CUDA_R_16BF;
  else return CUDA_R_16F;
}

// Compute type from the operands' precision policies (types checked by matmul()).
template <class PA, class PB, class PC>
constexpr cublasComputeType_t cublas_compute_type() {
  using In = storage_t<PA>;
  if constexpr (std::is_same_v<In, double>) return CUBLAS_COMPUTE_64F;
  else if constexpr (std::is_same_v<In, float>)
    return precision_traits<PA>::tensor_float_32 || precision_traits<PB>::tensor_float_32 ||
                   precision_traits<PC>::tensor_float_32
               ? CUBLAS_COMPUTE_32F_FAST_TF32
               : CUBLAS_COMPUTE_32F;
  else if constexpr (std::is_same_v<In, float16> && std::is_same_v<accumulate_t<PA>, float16>) return CUBLAS_COMPUTE_16F;
  else return CUBLAS_COMPUTE_32F;
}

template <class E>
cublasLtEpilogue_t cublaslt_epilogue(bool swapped) {
  if constexpr (!is_fused_epilogue_v<E>) {
    return CUBLASLT_EPILOGUE_DEFAULT;
  } else {
    constexpr bool bias = E::has_bias, aux = E::has_aux, gradient = E::has_gradient;
    switch (E::op) {
      case epilogue_op::bias: return CUBLASLT_EPILOGUE_BIAS;
      case epilogue_op::relu:
        return aux ? (bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX)
                   : (bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU);
      case epilogue_op::gelu_tanh:
        return aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                   : (bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU);
      case epilogue_op::relu_backward: return gradient ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
      case epilogue_op::gelu_tanh_backward: return gradient ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
      // fusor's a is cuBLASLt's B when the product is computed transposed.
      case epilogue_op::bias_gradient_a: return swapped ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
      case epilogue_op::bias_gradient_b: return swapped ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// Everything the algorithm and descriptors depend on; pointers only through their alignment.
struct cublaslt_key {
  int device = 0, compute = 0, ab_type = 0, cd_type = 0;
  bool transpose_a = false, transpose_b = false;
  index_t m = 0, n = 0, k = 0, batch = 0, lda = 0, ldb = 0, ldd = 0, stride_a = 0, stride_b = 0, stride_d = 0;
  unsigned epilogue = 0;
  index_t aux_ld = 0, aux_batch_stride = 0;
  unsigned align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;
  auto operator<=>(const cublaslt_key&) const = default;
};

// Descriptors and algorithm of one cached matmul configuration.
struct cublaslt_plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  cublaslt_plan() = default;
  cublaslt_plan(const cublaslt_plan&) = delete;
  cublaslt_plan& operator=(const cublaslt_plan&) = delete;
  cublaslt_plan(cublaslt_plan&& o) noexcept
      : desc(std::exchange(o.desc, nullptr)), a(std::exchange(o.a, nullptr)), b(std::exchange(o.b, nullptr)),
        d(std::exchange(o.d, nullptr)), algo(o.algo), workspace(o.workspace) {}
  ~cublaslt_plan() {  // statuses ignored: nothing to do about a failed destroy
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
  }
};

// Handles, workspace limits and plans, behind one lock. Never destroyed: the
// CUDA runtime may be gone by the time static destructors run.
struct cublaslt_state {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<int, std::size_t> workspace_limits;
  std::map<cublaslt_key, cublaslt_plan> plans;
};
inline cublaslt_state& cublaslt() {
  static cublaslt_state* state = new cublaslt_state;
  return *state;
}

// How many configurations are cached (for tests of the cache).
inline std::size_t cublaslt_cached_plans() {
  std::lock_guard lock(cublaslt().mutex);
  return cublaslt().plans.size();
}

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  FUSOR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}
template <class T>
void set_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
  FUSOR_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

inline cublasLtMatrixLayout_t make_layout(cudaDataType_t type, index_t rows, index_t cols, index_t ld, index_t batch,
                                          index_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  FUSOR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, std::uint64_t(rows), std::uint64_t(cols), std::int64_t(ld)));
  if (batch > 1) {
    set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, std::int32_t(batch));
    set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, std::int64_t(batch_stride));
  }
  return layout;
}

inline std::string describe(const cublaslt_key& k) {
  return std::string("m ") + std::to_string(k.m) + ", n " + std::to_string(k.n) + ", k " + std::to_string(k.k) + ", batch " +
         std::to_string(k.batch) + ", compute type " + std::to_string(k.compute) + ", epilogue " +
         std::to_string(k.epilogue) + ", pointer alignments (bytes) A " + std::to_string(k.align_a) + " B " +
         std::to_string(k.align_b) + " D " + std::to_string(k.align_d) + " bias " + std::to_string(k.align_bias) +
         " aux " + std::to_string(k.align_aux);
}

// Descriptors for the key, with the bias/aux pointers already set on `desc`
// by the caller's values (the heuristics read their alignment), and the best
// algorithm the heuristics offer.
inline cublaslt_plan make_plan(cublasLtHandle_t handle, const cublaslt_key& key, cublasComputeType_t compute,
                               cudaDataType_t scale_type, const void* bias, const void* aux, std::size_t workspace_limit) {
  cublaslt_plan plan;
  FUSOR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, scale_type));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, std::int32_t(key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, std::int32_t(key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t(key.epilogue));
  if (bias) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) {
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, std::int64_t(key.aux_ld));
    if (key.batch > 1)
      set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, std::int64_t(key.aux_batch_stride));
  }
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
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                               preference, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0))
    throw cuda_error(std::string("fusor: cuBLASLt has no algorithm for this matmul (") + describe(key) +
                     "); tensor-core kernels need 16-byte aligned pointers and leading dimensions, and epilogues "
                     "have their own rules: copy misaligned operands into fresh tensors");
  FUSOR_CUBLAS_CHECK(status);
  plan.algo = result.algo;
  plan.workspace = result.workspaceSize;
  return plan;
}

inline void require_element_aligned(const char* what, const void* p, std::size_t element_size) {
  if (p && alignment_of(p) < element_size)
    throw error(std::string("fusor: matmul's ") + what + " pointer is not aligned to its element size (" +
                std::to_string(element_size) + " bytes)");
}

// The plan for `key` (made and cached on first use), then one cublasLtMatmul
// on `stream` with this call's pointers; under the registry's lock.
inline void cublaslt_matmul(const cublaslt_key& key, cublasComputeType_t compute, cudaDataType_t scale_type,
                            const void* one, const void* zero, const gemm_problem& p, const void* bias,
                            const void* aux, cudaStream_t stream) {
  cublaslt_state& state = cublaslt();
  std::lock_guard lock(state.mutex);
  auto handle_at = state.handles.find(key.device);
  if (handle_at == state.handles.end()) {
    cublasLtHandle_t handle = nullptr;
    FUSOR_CUBLAS_CHECK(cublasLtCreate(&handle));
    int major = 0;
    FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, key.device));
    state.workspace_limits[key.device] = std::size_t(major == 9 ? 32 : 4) << 20;
    handle_at = state.handles.emplace(key.device, handle).first;
  }
  const cublasLtHandle_t handle = handle_at->second;
  auto plan_at = state.plans.find(key);
  if (plan_at == state.plans.end())
    plan_at = state.plans
                  .emplace(key, make_plan(handle, key, compute, scale_type, bias, aux, state.workspace_limits[key.device]))
                  .first;
  cublaslt_plan& plan = plan_at->second;
  if (bias) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  buffer<device_space> workspace(plan.workspace, stream);
  FUSOR_CUBLAS_CHECK(cublasLtMatmul(handle, plan.desc, one, p.a.data, plan.a, p.b.data, plan.b, zero, p.d.data, plan.d,
                                    p.d.data, plan.d, &plan.algo, workspace.data(), plan.workspace, stream));
  cuda::launch_counter().fetch_add(1);  // the cuBLASLt call counts as one launch
}

template <class CV, class AV, class BV, class E>
void run_matmul(const cuda_executor& executor, const CV& c, const AV& a, const BV& b, const E& ep) {
  static_assert(CV::space::device_accessible && AV::space::device_accessible && BV::space::device_accessible,
                "fusor: the cuda executor's matmul needs device-accessible memory (device or pinned)");
  using In = typename AV::element_type;
  using Out = typename CV::element_type;
  cuda::require("matmul on the cuda executor");
  const matrix_strides cs = strides_of(c), as = strides_of(a), bs = strides_of(b);
  const auto [aux_row_stride, aux_batch_stride] = check_epilogue(ep, cs, as, CV::rank == 3);
  const gemm_problem p = plan_gemm(cs, as, bs, aux_row_stride, aux_batch_stride);
  check_epilogue_plan(ep, p);

  const void* bias = nullptr;  // bias, or the bias gradient cuBLASLt writes through the same pointer
  const void* aux = nullptr;
  if constexpr (is_fused_epilogue_v<E>) {
    static_assert(epilogue_in_space<E>(false),
                  "fusor: the cuda executor's matmul epilogue needs its bias, pre-activation, mask and bias "
                  "gradient in device-accessible memory");
    if constexpr (E::has_bias) bias = ep.bias.data();
    if constexpr (E::has_gradient) bias = ep.gradient.data();
    if constexpr (E::has_aux) {
      if constexpr (is_relu_mask_ref_v<typename E::aux_type>) aux = ep.aux.bits;
      else aux = ep.aux.data();
    }
  }
  require_element_aligned("a", as.data, sizeof(In));
  require_element_aligned("b", bs.data, sizeof(In));
  require_element_aligned("c", cs.data, sizeof(Out));
  require_element_aligned("bias", bias, sizeof(Out));
  if constexpr (is_fused_epilogue_v<E>)
    if constexpr (E::has_aux && !is_relu_mask_ref_v<typename E::aux_type>)
      require_element_aligned("pre-activation", aux, sizeof(Out));

  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  constexpr cublasComputeType_t compute =
      cublas_compute_type<typename AV::precision, typename BV::precision, typename CV::precision>();
  cublaslt_key key;
  key.device = device;
  key.compute = int(compute);
  key.ab_type = int(cuda_data_type<In>());
  key.cd_type = int(cuda_data_type<Out>());
  key.transpose_a = p.a.transposed;
  key.transpose_b = p.b.transposed;
  key.m = p.m, key.n = p.n, key.k = p.k, key.batch = p.batch;
  key.lda = p.a.ld, key.ldb = p.b.ld, key.ldd = p.d.ld;
  key.stride_a = p.a.batch_stride, key.stride_b = p.b.batch_stride, key.stride_d = p.d.batch_stride;
  key.epilogue = unsigned(cublaslt_epilogue<E>(p.swapped));
  key.aux_ld = aux ? aux_row_stride : 0;
  key.aux_batch_stride = aux && p.batch > 1 ? aux_batch_stride : 0;
  key.align_a = alignment_of(p.a.data), key.align_b = alignment_of(p.b.data), key.align_d = alignment_of(p.d.data);
  key.align_bias = bias ? alignment_of(bias) : 0, key.align_aux = aux ? alignment_of(aux) : 0;
  if (p.batch > INT32_MAX) throw error("fusor: matmul's batch count does not fit cuBLASLt's 32-bit count");

  // alpha = 1, beta = 0 in the scale type.
  using scale_t = std::conditional_t<compute == CUBLAS_COMPUTE_64F, double,
                                     std::conditional_t<compute == CUBLAS_COMPUTE_16F, float16, float>>;
  const scale_t one = convert<scale_t>(1.0f), zero = convert<scale_t>(0.0f);

  cublaslt_matmul(key, compute, cuda_data_type<scale_t>(), &one, &zero, p, bias, aux, executor.stream);

  if constexpr (is_expression_epilogue_v<E>) assign(c, ep.function(c), executor);
}

}  // namespace fusor::detail
#endif  // FUSOR_HAS_CUDA
