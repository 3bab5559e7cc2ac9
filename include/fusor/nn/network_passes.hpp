// fusor/nn/network_passes.hpp — the elementwise passes nn::network runs
// itself (the input converted to the network's precision, tied gradients
// added into their owners), on flat views: one instance per element type,
// memory space and executor, whatever the network's shapes.
//
// Templates defined outside any class and not inline, so an `extern template`
// keeps a program from compiling them again: fusor::runtime and
// fusor::cuda_runtime hold the common ones (FUSOR_NETWORK_PASS_*_INSTANCES).
#pragma once

#include "fusor/core/tensor.hpp"
#include "fusor/exec/assign.hpp"

namespace fusor::nn::detail {

/// A contiguous buffer of E in S, any length.
template <class E, class S>
using flat_elements = view<E, dextents<index_t, 1>, row_major, S>;

/// to = from, converted to To's compute type, then stored as To.
template <class To, class From, class S, class Executor>
void convert_into(const flat_elements<To, S>& to, const flat_elements<From, S>& from, const Executor& ex) {
  assign(to, cast<compute_t<To>>(from), ex);
}
/// sum += addend.
template <class E, class S, class Executor>
void add_into(const flat_elements<E, S>& sum, const flat_elements<E, S>& addend, const Executor& ex) {
  assign(sum, sum + addend, ex);
}

// The common instances (fp32 images into fp32 or bf16 networks; fp32 and bf16
// gradients). PREFIX is `extern` for the declarations below and empty where a
// library defines them.
#define FUSOR_NETWORK_PASS_INSTANCES(PREFIX, E, S, Executor) \
  PREFIX template void add_into<E, S, Executor>(const flat_elements<E, S>&, const flat_elements<E, S>&, const Executor&)
#define FUSOR_NETWORK_PASS_HOST_INSTANCES(PREFIX) FUSOR_NETWORK_PASS_INSTANCES(PREFIX, float, host_space, host_executor)
#define FUSOR_NETWORK_PASS_CUDA_INSTANCES(PREFIX)                                                                   \
  FUSOR_NETWORK_PASS_INSTANCES(PREFIX, float, device_space, cuda_executor);                                         \
  FUSOR_NETWORK_PASS_INSTANCES(PREFIX, __nv_bfloat16, device_space, cuda_executor);                                 \
  PREFIX template void convert_into<__nv_bfloat16, float, device_space, cuda_executor>(                             \
      const flat_elements<__nv_bfloat16, device_space>&, const flat_elements<float, device_space>&,                 \
      const cuda_executor&)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_NETWORK_PASS_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_NETWORK_PASS_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::nn::detail
