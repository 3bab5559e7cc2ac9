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
set(_dp_src ${CMAKE_CURRENT_LIST_DIR}/..)

# One GPU over NCCL: the CUDA path (communication stream and events) of a step.
if(FUSOR_ENABLE_CUDA)
  find_package(CUDAToolkit)
  find_path(FUSOR_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(FUSOR_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(FUSOR_NCCL_INCLUDE_DIR AND FUSOR_NCCL_LIBRARY)
    add_executable(fusor_parallel_data_nccl_tests ${_dp_src}/cuda_main.cu ${_dp_src}/parallel/test_data_parallel_nccl.cu)
    target_link_libraries(fusor_parallel_data_nccl_tests PRIVATE fusor::blas doctest::doctest ${FUSOR_NCCL_LIBRARY})
    target_include_directories(fusor_parallel_data_nccl_tests PRIVATE ${_dp_src} ${FUSOR_NCCL_INCLUDE_DIR})
    target_compile_definitions(fusor_parallel_data_nccl_tests PRIVATE FUSOR_TEST_CUDA=1)
    add_test(NAME parallel_data_nccl_cuda COMMAND fusor_parallel_data_nccl_tests)
    set_tests_properties(parallel_data_nccl_cuda PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endif()

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the data-parallel tests under mpirun")
  return()
endif()
add_executable(fusor_parallel_data_mpi_tests ${_dp_src}/comm/mpi_main.cpp ${_dp_src}/parallel/test_data_parallel.cpp)
target_link_libraries(fusor_parallel_data_mpi_tests PRIVATE fusor::mpi fusor::blas doctest::doctest)
target_include_directories(fusor_parallel_data_mpi_tests PRIVATE ${_dp_src})
target_compile_options(fusor_parallel_data_mpi_tests PRIVATE -Wall -Wextra)
# As root OpenMPI needs --allow-run-as-root; --oversubscribe runs 4 ranks on fewer
# cores, where one thread per rank is fastest.
foreach(ranks 2 3 4)
  add_test(NAME parallel_data_mpi_np${ranks}
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${ranks}
            $<TARGET_FILE:fusor_parallel_data_mpi_tests>)
  set_tests_properties(parallel_data_mpi_np${ranks} PROPERTIES TIMEOUT 600
    ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
