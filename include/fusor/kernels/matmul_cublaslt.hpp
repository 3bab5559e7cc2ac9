// fusor/kernels/matmul_cublaslt.hpp — matmul under the CUDA executor: one
// cublasLtMatmul call with the epilogue fused, on the executor's stream.
//
// The precision policy picks the compute type: fp32 exact (COMPUTE_32F), tf32
// tensor cores when an operand's policy says so (COMPUTE_32F_FAST_TF32),
// bf16/fp16 inputs with fp32 accumulation (COMPUTE_32F), fp16 accumulation
// when asked for (COMPUTE_16F), fp64 (COMPUTE_64F). Plans (descriptors and the
// heuristics' algorithm, cached per device and configuration) come from
// kernels/matmul_cublaslt_plan.hpp, the workspace from the stream's own
// (kernels/matmul_workspace.hpp). Where cuBLASLt has no algorithm with a
// bias-gradient epilogue, the product runs without it and the bias gradient is
// summed by fusor's kernel (kernels/matmul_bias_gradient.hpp; one or two more
// launches); any other epilogue without an algorithm is a cuda_error naming
// the problem. No host synchronisation. A cuBLASLt matmul counts as one launch
// in fusor::gpu::launch_counter(); an expression epilogue adds its own pass.
// Only translation units compiled by nvcc see this header's content.
#pragma once

#include "fusor/config.hpp"

#if FUSOR_HAS_CUDA
#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/matmul_bias_gradient.hpp"
#include "fusor/kernels/matmul_cublaslt_plan.hpp"
#include "fusor/kernels/matmul_epilogue.hpp"
#include "fusor/kernels/matmul_layout.hpp"
#include "fusor/kernels/matmul_workspace.hpp"

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

// Whether the epilogue writes a bias gradient.
template <class E>
constexpr bool has_bias_gradient() {
  if constexpr (is_fused_epilogue_v<E>) return E::has_gradient;
  else return false;
}

inline void require_element_aligned(const char* what, const void* p, std::size_t element_size) {
  if (p && alignment_of(p) < element_size)
    throw error(std::string("fusor: matmul's ") + what + " pointer is not aligned to its element size (" +
                std::to_string(element_size) + " bytes)");
}

// One cublasLtMatmul on `stream` with this call's pointers. The plan's
// descriptor is shared by every thread: a plan with bias or aux pointers sets
// them and calls under the plan's lock; one without only reads the descriptor,
// so it needs no lock.
inline void cublaslt_enqueue(const cublaslt_context& context, const void* one, const void* zero, const gemm_problem& p,
                             const void* bias, const void* aux, void* workspace, cudaStream_t stream) {
  cublaslt_plan& plan = *context.plan;
  std::unique_lock lock(plan.mutex, std::defer_lock);
  if (plan.uses_bias_pointer || plan.uses_aux_pointer) lock.lock();
  if (plan.uses_bias_pointer) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (plan.uses_aux_pointer) set_attribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
  FUSOR_CUBLAS_CHECK(cublasLtMatmul(context.handle, plan.desc, one, p.a.data, plan.a, p.b.data, plan.b, zero, p.d.data,
                                    plan.d, p.d.data, plan.d, &plan.algo, workspace, plan.workspace, stream));
  gpu::launch_counter().fetch_add(1);  // the cuBLASLt call counts as one launch
}

// The sums of a bias gradient made apart from the GEMM: db[i] = sum_k a[i, k],
// db[j] = sum_k b[k, j] (as stored), or db[j] = sum over every row of c of
// c[i, j], read through D = c^T (rows contiguous, a batch flattened: checked).
template <class E>
strided_sum_shape bias_gradient_sums(const matrix_strides& a, const matrix_strides& b, const gemm_problem& p) {
  if constexpr (E::op == epilogue_op::bias_gradient_a) return {a.rows, a.cols, a.row_stride, a.col_stride};
  else if constexpr (E::op == epilogue_op::bias_gradient_b) return {b.cols, b.rows, b.col_stride, b.row_stride};
  else return {p.m, p.n, 1, p.d.ld};
}

template <class CV, class AV, class BV, class E>
void run_matmul(const cuda_executor& executor, const CV& c, const AV& a, const BV& b, const E& ep) {
  static_assert(CV::space::device_accessible && AV::space::device_accessible && BV::space::device_accessible,
                "fusor: the cuda executor's matmul needs device-accessible memory (device or pinned)");
  using In = typename AV::element_type;
  using Out = typename CV::element_type;
  gpu::require("matmul on the cuda executor");
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
  constexpr bool gradient = has_bias_gradient<E>();
  cublaslt_key key;
  key.device = device;
  key.compute = int(compute);
  key.ab_type = int(cuda_data_type<In>());
  key.cd_type = int(cuda_data_type<Out>());
  key.transpose_a = p.a.transposed;
  key.transpose_b = p.b.transposed;
  key.swapped = p.swapped;
  key.m = p.m, key.n = p.n, key.k = p.k, key.batch = p.batch;
  key.lda = p.a.ld, key.ldb = p.b.ld, key.ldd = p.d.ld;
  key.stride_a = p.a.batch_stride, key.stride_b = p.b.batch_stride, key.stride_d = p.d.batch_stride;
  key.epilogue = unsigned(cublaslt_epilogue<E>(p.swapped));
  key.separate_bias_gradient = gradient && separate_bias_gradient_forced().load(std::memory_order_relaxed);
  if (key.separate_bias_gradient) bias = nullptr;  // the plan is made without it
  key.aux_ld = aux ? aux_row_stride : 0;
  key.aux_batch_stride = aux && p.batch > 1 ? aux_batch_stride : 0;
  key.align_a = alignment_of(p.a.data), key.align_b = alignment_of(p.b.data), key.align_d = alignment_of(p.d.data);
  key.align_bias = bias ? alignment_of(bias) : 0, key.align_aux = aux ? alignment_of(aux) : 0;
  if (p.batch > INT32_MAX) throw error("fusor: matmul's batch count does not fit cuBLASLt's 32-bit count");

  // alpha = 1, beta = 0 in the scale type.
  using scale_t = std::conditional_t<compute == CUBLAS_COMPUTE_64F, double,
                                     std::conditional_t<compute == CUBLAS_COMPUTE_16F, float16, float>>;
  const scale_t one = convert<scale_t>(1.0f), zero = convert<scale_t>(0.0f);

  const cublaslt_context context = cublaslt_context_for(key, compute, cuda_data_type<scale_t>(), bias, aux);
  if constexpr (gradient) {
    if (context.plan->separate_bias_gradient) {
      // The GEMM, then the sums, on one stream: they share the workspace.
      using summed = std::conditional_t<E::input_gradient, In, Out>;
      using accumulator = strided_sum_accumulator_t<summed>;
      const void* x = E::op == epilogue_op::bias_gradient_a   ? as.data
                      : E::op == epilogue_op::bias_gradient_b ? bs.data
                                                              : p.d.data;
      const strided_sum_shape sums = bias_gradient_sums<E>(as, bs, p);
      const strided_sum_plan plan =
          plan_strided_sum(sums, sizeof(accumulator), gpu::multiprocessor_count(), context.workspace_limit);
      const auto workspace = matmul_workspaces().acquire(
          device, executor.stream, std::max(context.plan->workspace, plan.scratch_bytes), context.workspace_limit);
      cublaslt_enqueue(context, &one, &zero, p, nullptr, aux, workspace.data(), executor.stream);
      launch_strided_sum<accumulator>(ep.gradient.data(), static_cast<const summed*>(x), sums, plan, workspace.data(),
                                      executor.stream);
      return;
    }
  }
  {
    const auto workspace =
        matmul_workspaces().acquire(device, executor.stream, context.plan->workspace, context.workspace_limit);
    cublaslt_enqueue(context, &one, &zero, p, bias, aux, workspace.data(), executor.stream);
  }
  if constexpr (is_expression_epilogue_v<E>) assign(c, ep.function(c), executor);
}

}  // namespace fusor::detail
#endif  // FUSOR_HAS_CUDA
