# Data parallelism (fusor/parallel/data_parallel.hpp, issue 5): against
# optim::trainer on one rank with the same global batch (computed in the same
# job), under every bucket size, overlap on and off, micro-batches, bf16
# communication and ZeRO-1; the timeline showing overlap; memory; errors.
# Over comm::single always; over MPI under mpirun -np 2, 3 (buckets padded for
# ZeRO-1) and 4; over NCCL on one GPU (compiled by nvcc in every CUDA configure,
# run where a GPU is).
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found; skipping the data-parallel tests")
  return()
endif()

fusor_add_test_suite(parallel_data
  HOST_TESTS parallel/test_data_parallel_single.cpp
  LIBRARIES fusor::blas
)

# One GPU over NCCL: the CUDA path (communication stream and events) of a step.
fusor_add_nccl_test(parallel_data SOURCES parallel/test_data_parallel_nccl.cu LIBRARIES fusor::blas)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the data-parallel tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(parallel_data SOURCES parallel/test_data_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 3 4 TIMEOUT 600 ONE_THREAD_PER_RANK)
