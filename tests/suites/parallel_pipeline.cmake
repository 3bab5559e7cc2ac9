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
set(pipeline_src ${CMAKE_CURRENT_LIST_DIR}/..)

if(FUSOR_ENABLE_CUDA)
  find_package(CUDAToolkit)
  find_path(FUSOR_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(FUSOR_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(FUSOR_NCCL_INCLUDE_DIR AND FUSOR_NCCL_LIBRARY)
    add_executable(fusor_parallel_pipeline_nccl_tests ${pipeline_src}/cuda_main.cu
                   ${pipeline_src}/parallel/test_pipeline_nccl.cu)
    target_link_libraries(fusor_parallel_pipeline_nccl_tests PRIVATE fusor::blas doctest::doctest ${FUSOR_NCCL_LIBRARY})
    target_include_directories(fusor_parallel_pipeline_nccl_tests PRIVATE ${pipeline_src} ${FUSOR_NCCL_INCLUDE_DIR})
    target_compile_definitions(fusor_parallel_pipeline_nccl_tests PRIVATE FUSOR_TEST_CUDA=1)
    add_test(NAME parallel_pipeline_nccl_cuda COMMAND fusor_parallel_pipeline_nccl_tests)
    set_tests_properties(parallel_pipeline_nccl_cuda PROPERTIES SKIP_RETURN_CODE 77)
  endif()
endif()

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the pipeline's MPI tests")
  return()
endif()
add_executable(fusor_parallel_pipeline_mpi_tests ${pipeline_src}/comm/mpi_main.cpp
               ${pipeline_src}/parallel/test_pipeline_mpi.cpp)
target_link_libraries(fusor_parallel_pipeline_mpi_tests PRIVATE fusor::mpi fusor::blas doctest::doctest)
target_include_directories(fusor_parallel_pipeline_mpi_tests PRIVATE ${pipeline_src})
target_compile_options(fusor_parallel_pipeline_mpi_tests PRIVATE -Wall -Wextra)
# As root OpenMPI needs --allow-run-as-root; --oversubscribe runs 4 ranks on fewer cores.
foreach(ranks 2 4)
  add_test(NAME parallel_pipeline_mpi_np${ranks}
           COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${ranks}
                   $<TARGET_FILE:fusor_parallel_pipeline_mpi_tests>)
  set_tests_properties(parallel_pipeline_mpi_np${ranks} PROPERTIES TIMEOUT 300)
endforeach()
