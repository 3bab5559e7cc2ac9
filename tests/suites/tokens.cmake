# The per-token layers of a GPT (issue 13): nn::linear over features<Lead..., In>,
# nn::rmsnorm, nn::silu and nn::position_embedding. Forward and backward against
# double loops, fp32 and bf16, under every executor; backward against central
# differences in fp64 on the host; split (column -> row) per-token linears
# against the unsplit network over comm::single, and over MPI at 2 and 4 ranks.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found; skipping the token-layer tests")
  return()
endif()

fusor_add_test_suite(tokens
  EXECUTOR_TESTS
    nn/test_token_layers.cpp
  HOST_TESTS
    nn/test_token_layer_gradients.cpp
    nn/test_token_layer_parallel.cpp
  LIBRARIES fusor::blas
)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the per-token tensor-parallel tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(tokens SOURCES nn/test_token_layer_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 4 TIMEOUT 300 ONE_THREAD_PER_RANK)
target_compile_definitions(fusor_tokens_mpi_tests PRIVATE FUSOR_TEST_MPI=1)
