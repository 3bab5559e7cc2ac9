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
set(_tp_src ${CMAKE_CURRENT_LIST_DIR}/..)

# compile_fail.tensor_parallel_width_not_divisible: nn::column_parallel<3> over 128.
set(_tp_compile_flags -std=c++20 -I${PROJECT_SOURCE_DIR}/include)
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS _fusor_cblas_include_dirs)
  list(APPEND _tp_compile_flags -isystem ${dir})
  if(EXISTS ${dir}/cccl)
    list(APPEND _tp_compile_flags -isystem ${dir}/cccl)
  endif()
endforeach()
set(_tp_script ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_tensor_parallel_width.cmake)
set(_tp_content "set(COMPILER [==[${CMAKE_CXX_COMPILER}]==])\nset(SOURCE [==[${_tp_src}/parallel/compile_fail/width_not_divisible.cpp]==])\nset(MODE fail)\nset(FLAGS)\n")
foreach(flag IN LISTS _tp_compile_flags)
  string(APPEND _tp_content "list(APPEND FLAGS [==[${flag}]==])\n")
endforeach()
string(APPEND _tp_content "set(REASON \"\")\nset(PATTERNS)\n")
foreach(pattern "a tensor-parallel degree must divide the width it splits"
                "tensor_parallel_degree_must_divide_width<Width, Ways, Divides>::check.. .with long unsigned int Width = 128; int Ways = 3")
  string(APPEND _tp_content "list(APPEND PATTERNS [==[${pattern}]==])\n")
endforeach()
string(APPEND _tp_content "include([==[${PROJECT_SOURCE_DIR}/tests/compile_fail/run_compile_test.cmake]==])\n")
file(CONFIGURE OUTPUT ${_tp_script} CONTENT "${_tp_content}")
add_test(NAME compile_fail.tensor_parallel_width_not_divisible COMMAND ${CMAKE_COMMAND} -P ${_tp_script})

# One GPU over NCCL (nvcc; the CUDA path of split layers and of the shard group).
fusor_add_nccl_test(parallel_tensor SOURCES parallel/test_tensor_parallel_nccl.cu LIBRARIES fusor::blas)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the tensor-parallel tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(parallel_tensor SOURCES parallel/test_tensor_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 600 ONE_THREAD_PER_RANK)
