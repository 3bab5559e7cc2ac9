// src/kernels.cpp — part of the fusor_runtime library (FUSOR_SEPARATE_COMPILATION,
// see fusor/config.hpp): the definitions of fusor/kernels/'s non-template functions,
// compiled once here instead of in every program that includes the headers.
#if !defined(FUSOR_SEPARATE_COMPILATION)
#error "fusor_runtime is compiled with FUSOR_SEPARATE_COMPILATION (CMake's fusor::runtime defines it)"
#endif

#include "fusor/kernels/impl/matmul_layout.ipp"
#include "fusor/kernels/impl/matmul_epilogue.ipp"
#include "fusor/kernels/impl/rows.ipp"
#include "fusor/kernels/cross_entropy.hpp"

namespace fusor::detail {
template void cross_entropy_host<true>(const row_matrix<float>&, const per_row<double>&, const row_matrix<const float>&,
                                       const per_row<int>&, const cross_entropy_options&, const host_executor&);
template void cross_entropy_host<false>(const row_matrix<float>&, const per_row<double>&, const row_matrix<const float>&,
                                        const per_row<int>&, const cross_entropy_options&, const host_executor&);
}  // namespace fusor::detail
