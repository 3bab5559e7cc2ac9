// src/cuda/data.cu — part of the fusor_cuda_runtime library
// (FUSOR_CUDA_SEPARATE_COMPILATION, see fusor/config.hpp), compiled by nvcc:
// the input pipeline, fusor::data::loader for device_space and host_space,
// compiled once here instead of in every .cu file that trains from it.
#if !defined(FUSOR_CUDA_SEPARATE_COMPILATION) || !defined(__CUDACC__)
#error "fusor_cuda_runtime is compiled by nvcc with FUSOR_CUDA_SEPARATE_COMPILATION (CMake's fusor::cuda_runtime)"
#endif

#include "fusor/data/loader.hpp"

namespace fusor::data {
template class loader<host_space>;
template class loader<device_space>;
}  // namespace fusor::data
