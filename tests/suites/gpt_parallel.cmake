# A GPT split Megatron's way (issue 13): attention heads and the first MLP
# matrix column-parallel (the qkv projection in three interleaved parts,
# nn::column_parallel<W, 3>), the output projections row-parallel; logits,
# loss, every gradient, the all-reduces per step and AdamW steps with clipping
# against the unsplit network. Over comm::single (one way) here, over MPI at 2
# and 4 ranks; a Parts * Ways that does not divide the width fails to compile.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found; skipping the split-GPT tests")
  return()
endif()

fusor_add_test_suite(gpt_parallel
  HOST_TESTS nn/test_gpt_block_parallel.cpp
  LIBRARIES fusor::blas
)

# compile_fail.gpt_parallel_qkv_parts_not_divisible: column_parallel<3, 3> over a
# qkv width of 96 (3 divides 96, not each part of 32): fusor's message first,
# naming width, parts and ways; column_parallel<2, 3> compiles
# (tests/compile_fail/run_compile_test.cmake).
set(_gpt_tp_flags -std=c++20 -I${PROJECT_SOURCE_DIR}/include)
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS _fusor_cblas_include_dirs)
  list(APPEND _gpt_tp_flags -isystem ${dir})
  if(EXISTS ${dir}/cccl)
    list(APPEND _gpt_tp_flags -isystem ${dir}/cccl)
  endif()
endforeach()
set(_gpt_tp_script ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_gpt_parallel_qkv_parts.cmake)
set(_gpt_tp_content "set(COMPILER [==[${CMAKE_CXX_COMPILER}]==])\nset(SOURCE [==[${PROJECT_SOURCE_DIR}/tests/nn/compile_fail/qkv_parts_not_divisible.cpp]==])\nset(MODE fail)\nset(FLAGS)\n")
foreach(flag IN LISTS _gpt_tp_flags)
  string(APPEND _gpt_tp_content "list(APPEND FLAGS [==[${flag}]==])\n")
endforeach()
string(APPEND _gpt_tp_content "set(REASON \"\")\nset(PATTERNS)\n")
foreach(pattern "Parts [*] Ways must divide the output width"
                "column_parallel_parts_times_ways_must_divide_width<Width, Parts, Ways, Divides>::check.. .with long unsigned int Width = 96; int Parts = 3; int Ways = 3")
  string(APPEND _gpt_tp_content "list(APPEND PATTERNS [==[${pattern}]==])\n")
endforeach()
string(APPEND _gpt_tp_content "include([==[${PROJECT_SOURCE_DIR}/tests/compile_fail/run_compile_test.cmake]==])\n")
file(CONFIGURE OUTPUT ${_gpt_tp_script} CONTENT "${_gpt_tp_content}")
add_test(NAME compile_fail.gpt_parallel_qkv_parts_not_divisible COMMAND ${CMAKE_COMMAND} -P ${_gpt_tp_script})

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the split-GPT tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(gpt_parallel SOURCES nn/test_gpt_block_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 300 ONE_THREAD_PER_RANK)
target_compile_definitions(fusor_gpt_parallel_mpi_tests PRIVATE FUSOR_TEST_MPI=1)
