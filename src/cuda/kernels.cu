// src/cuda/kernels.cu — part of the fusor_cuda_runtime library
// (FUSOR_CUDA_SEPARATE_COMPILATION, see fusor/config.hpp), compiled by nvcc:
// the definitions of fusor/kernels/'s GPU-side non-template functions (the
// cuBLASLt plans), compiled once here instead of in every .cu file.
#if !defined(FUSOR_CUDA_SEPARATE_COMPILATION) || !defined(__CUDACC__)
#error "fusor_cuda_runtime is compiled by nvcc with FUSOR_CUDA_SEPARATE_COMPILATION (CMake's fusor::cuda_runtime)"
#endif

#include "fusor/kernels/impl/matmul_cublaslt_plan.ipp"
