// src/nn.cpp — part of the fusor_runtime library (FUSOR_SEPARATE_COMPILATION,
// see fusor/config.hpp): the definitions of fusor/nn/'s non-template functions,
// compiled once here instead of in every program that includes the headers.
#if !defined(FUSOR_SEPARATE_COMPILATION)
#error "fusor_runtime is compiled with FUSOR_SEPARATE_COMPILATION (CMake's fusor::runtime defines it)"
#endif

#include "fusor/nn/impl/parameters.ipp"
#include "fusor/nn/impl/linear.ipp"
#include "fusor/nn/impl/parameter_directory.ipp"
#include "fusor/nn/linear_kernels.hpp"
#include "fusor/nn/loss.hpp"
#include "fusor/nn/network_passes.hpp"

namespace fusor::nn {
template void initialize_parameter<float>(float*, index_t, const initializer&, std::uint64_t);
template void initialize_parameter<float>(float*, const parameter_spec&, std::uint64_t, int);
template void initialize_parameter<__nv_bfloat16>(__nv_bfloat16*, index_t, const initializer&, std::uint64_t);
template void initialize_parameter<__nv_bfloat16>(__nv_bfloat16*, const parameter_spec&, std::uint64_t, int);
FUSOR_LOSS_HOST_INSTANCES();
}  // namespace fusor::nn

namespace fusor::nn::detail {
FUSOR_LINEAR_HOST_INSTANCES();
FUSOR_NETWORK_PASS_HOST_INSTANCES();
FUSOR_PARAMETER_GROUP_HOST_INSTANCES();
}  // namespace fusor::nn::detail
