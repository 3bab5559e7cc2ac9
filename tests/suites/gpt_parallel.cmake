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
# (tests/compile_fail/compile_test.cmake).
fusor_compile_test(gpt_parallel_qkv_parts_not_divisible nn/compile_fail/qkv_parts_not_divisible.cpp fail
  "Parts [*] Ways must divide the output width"
  "column_parallel_parts_times_ways_must_divide_width<Width, Parts, Ways, Divides>::check.. .with long unsigned int Width = 96; int Parts = 3; int Ways = 3"
  COMPILERS cxx)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the split-GPT tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(gpt_parallel SOURCES nn/test_gpt_block_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 300 ONE_THREAD_PER_RANK)
target_compile_definitions(fusor_gpt_parallel_mpi_tests PRIVATE FUSOR_TEST_MPI=1)
