# Pipeline parallelism (parallel/pipeline.hpp, issue 5). The schedules and stage
# maps are checked without MPI, the pipeline on one rank over comm::single; under
# mpirun -np 2 and 4 (OpenMPI) GPipe and 1F1B must train as optim::trainer does.
# A one-rank pipeline over comm::nccl is compiled by nvcc wherever CUDA and NCCL
# are found and runs (not skipped) only where a GPU is.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found; skipping the pipeline tests")
  return()
endif()

fusor_add_test_suite(parallel_pipeline HOST_TESTS parallel/test_pipeline.cpp LIBRARIES fusor::blas)
fusor_add_nccl_test(parallel_pipeline SOURCES parallel/test_pipeline_nccl.cu LIBRARIES fusor::blas)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the pipeline's MPI tests")
  return()
endif()
fusor_add_mpi_test_suite(parallel_pipeline SOURCES parallel/test_pipeline_mpi.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 300)
