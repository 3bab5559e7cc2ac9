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

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the split-GPT tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(gpt_parallel SOURCES nn/test_gpt_block_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 300 ONE_THREAD_PER_RANK)
target_compile_definitions(fusor_gpt_parallel_mpi_tests PRIVATE FUSOR_TEST_MPI=1)
