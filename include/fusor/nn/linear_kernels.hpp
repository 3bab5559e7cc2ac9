// fusor/nn/linear_kernels.hpp — the work of nn::linear on views of dynamic
// extents ([rows, width] activations, [out, in] weight, [out] bias): one
// instance per precision, memory space and executor, whatever the layer's
// sizes (the network checked those when it was composed).
//
// The functions are templates defined outside any class and not inline, so
// an `extern template` keeps a program from compiling them again:
// fusor::cuda_runtime holds the GPU's for bf16 and fp32 networks
// (FUSOR_LINEAR_CUDA_INSTANCES), fusor::runtime the host's ReLU mask for fp32
// (FUSOR_LINEAR_HOST_INSTANCES; the host's matmuls need OpenBLAS, which
// fusor::runtime does not link).
#pragma once

#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/kernels/matmul.hpp"

namespace fusor::nn::detail {

/// [rows, width] activations or a [out, in] weight, any size.
template <class P, class S>
using linear_rows = view<P, dextents<index_t, 2>, row_major, S>;
/// A [out] bias, any size.
template <class P, class S>
using linear_vector = view<P, dextents<index_t, 1>, row_major, S>;

/// y = x w^T + b.
template <class P, class S, class Executor>
void linear_bias_forward(const linear_rows<P, S>& y, const linear_rows<P, S>& x, const linear_rows<P, S>& w,
                         const linear_vector<P, S>& b, const Executor& ex) {
  matmul(y, x, transpose(w), epilogue::bias(b), ex);
}
/// y = relu(x w^T + b).
template <class P, class S, class Executor>
void linear_relu_forward(const linear_rows<P, S>& y, const linear_rows<P, S>& x, const linear_rows<P, S>& w,
                         const linear_vector<P, S>& b, const Executor& ex) {
  matmul(y, x, transpose(w), epilogue::relu(b), ex);
}
/// dy = dy where y > 0, else 0: the gradient of a ReLU layer's pre-activation, in place.
template <class P, class S, class Executor>
void linear_relu_mask(const linear_rows<P, S>& dy, const linear_rows<P, S>& y, const Executor& ex) {
  assign(dy, where(y > 0, dy, 0), ex);
}
/// dw = dy^T x and db = the column sums of dy, in one matmul.
template <class P, class S, class Executor>
void linear_parameter_gradients(const linear_rows<P, S>& dw, const linear_vector<P, S>& db,
                                const linear_rows<P, S>& dy, const linear_rows<P, S>& x, const Executor& ex) {
  matmul(dw, transpose(dy), x, epilogue::bias_gradient_a(db), ex);
}
/// dx = dy w.
template <class P, class S, class Executor>
void linear_input_gradient(const linear_rows<P, S>& dx, const linear_rows<P, S>& dy, const linear_rows<P, S>& w,
                           const Executor& ex) {
  matmul(dx, dy, w, epilogue::none{}, ex);
}

// The common instances, compiled once (see the top of this file). PREFIX is
// `extern` for the declarations below and empty where a library defines them.
#define FUSOR_LINEAR_INSTANCES(PREFIX, P, S, Executor)                                                             \
  PREFIX template void linear_bias_forward<P, S, Executor>(const linear_rows<P, S>&, const linear_rows<P, S>&,     \
                                                           const linear_rows<P, S>&, const linear_vector<P, S>&,   \
                                                           const Executor&);                                       \
  PREFIX template void linear_relu_forward<P, S, Executor>(const linear_rows<P, S>&, const linear_rows<P, S>&,     \
                                                           const linear_rows<P, S>&, const linear_vector<P, S>&,   \
                                                           const Executor&);                                       \
  PREFIX template void linear_relu_mask<P, S, Executor>(const linear_rows<P, S>&, const linear_rows<P, S>&,        \
                                                        const Executor&);                                          \
  PREFIX template void linear_parameter_gradients<P, S, Executor>(const linear_rows<P, S>&,                        \
                                                                  const linear_vector<P, S>&,                      \
                                                                  const linear_rows<P, S>&,                        \
                                                                  const linear_rows<P, S>&, const Executor&);      \
  PREFIX template void linear_input_gradient<P, S, Executor>(const linear_rows<P, S>&, const linear_rows<P, S>&,   \
                                                             const linear_rows<P, S>&, const Executor&)
#define FUSOR_LINEAR_HOST_INSTANCES(PREFIX) \
  PREFIX template void linear_relu_mask<fp32, host_space, host_executor>(const linear_rows<fp32, host_space>&, \
                                                                          const linear_rows<fp32, host_space>&,  \
                                                                          const host_executor&)
#define FUSOR_LINEAR_CUDA_INSTANCES(PREFIX)                    \
  FUSOR_LINEAR_INSTANCES(PREFIX, bf16, device_space, cuda_executor); \
  FUSOR_LINEAR_INSTANCES(PREFIX, fp32, device_space, cuda_executor)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_LINEAR_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_LINEAR_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::nn::detail
