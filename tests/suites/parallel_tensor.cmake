# Tensor parallelism (fusor/parallel/tensor_parallel.hpp, issue 5): split MLPs
# against the unsplit network, forward, backward and AdamW training. Over
# comm::single (one way) always; over MPI under mpirun -np 2 and -np 4; over
# NCCL on one GPU (compiled by nvcc in every CUDA configure, run where a GPU is).
# A degree that does not divide a layer's width fails to compile.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found; skipping the tensor-parallel tests")
  return()
endif()

fusor_add_test_suite(parallel_tensor
  HOST_TESTS parallel/test_tensor_parallel_single.cpp
  LIBRARIES fusor::blas
)

# compile_fail.tensor_parallel_width_not_divisible: nn::column_parallel<3> over 128.
fusor_compile_test(tensor_parallel_width_not_divisible parallel/compile_fail/width_not_divisible.cpp fail
  "a tensor-parallel degree must divide the width it splits"
  "tensor_parallel_degree_must_divide_width<Width, Ways, Divides>::check.. .with long unsigned int Width = 128; int Ways = 3"
  COMPILERS cxx)

# One GPU over NCCL (nvcc; the CUDA path of split layers and of the shard group).
fusor_add_nccl_test(parallel_tensor SOURCES parallel/test_tensor_parallel_nccl.cu LIBRARIES fusor::blas)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the tensor-parallel tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(parallel_tensor SOURCES parallel/test_tensor_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 600 ONE_THREAD_PER_RANK)
