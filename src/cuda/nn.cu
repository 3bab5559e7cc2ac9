// src/cuda/nn.cu — part of the fusor_cuda_runtime library
// (FUSOR_CUDA_SEPARATE_COMPILATION, see fusor/config.hpp), compiled by nvcc:
// the GPU instances of fusor/nn/ that most programs use, compiled once here
// instead of in every .cu file that trains a network.
#if !defined(FUSOR_CUDA_SEPARATE_COMPILATION) || !defined(__CUDACC__)
#error "fusor_cuda_runtime is compiled by nvcc with FUSOR_CUDA_SEPARATE_COMPILATION (CMake's fusor::cuda_runtime)"
#endif

#include "fusor/nn/linear_kernels.hpp"
#include "fusor/nn/loss.hpp"
#include "fusor/nn/network_passes.hpp"
#include "fusor/nn/parameter_directory.hpp"

namespace fusor::nn {
FUSOR_LOSS_CUDA_INSTANCES();
}  // namespace fusor::nn

namespace fusor::nn::detail {
FUSOR_LINEAR_CUDA_INSTANCES();
FUSOR_NETWORK_PASS_CUDA_INSTANCES();
FUSOR_PARAMETER_GROUP_CUDA_INSTANCES();
}  // namespace fusor::nn::detail
