// src/cuda/optim.cu — part of the fusor_cuda_runtime library
// (FUSOR_CUDA_SEPARATE_COMPILATION, see fusor/config.hpp), compiled by nvcc:
// the GPU instances of fusor/optim/ that every trainer of fp32 or bf16
// parameters uses (AdamW, the update controller's tasks and gradient norm).
#if !defined(FUSOR_CUDA_SEPARATE_COMPILATION) || !defined(__CUDACC__)
#error "fusor_cuda_runtime is compiled by nvcc with FUSOR_CUDA_SEPARATE_COMPILATION (CMake's fusor::cuda_runtime)"
#endif

#include "fusor/optim/adamw.hpp"
#include "fusor/optim/pruning.hpp"
#include "fusor/optim/update_controller.hpp"

namespace fusor::optim {
FUSOR_ADAMW_CUDA_INSTANCES();
FUSOR_CONTROLLER_CUDA_INSTANCES();
FUSOR_PRUNING_CUDA_INSTANCES();
}  // namespace fusor::optim
