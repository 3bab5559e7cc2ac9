# Composite layers (fusor/nn/chain.hpp, residual.hpp, branches.hpp, recompute.hpp)
# and the layer protocol (docs/layers.md), issue 13: forward and backward of
# fp32 composites against fp64 references under every executor, fp64 central
# differences on the host, training and checkpoints through nested names,
# recomputation bit for bit, tensor parallelism through composites (comm::single
# here, MPI under mpirun -np 2), compile-time errors, and the doc's SwiGLU code
# being the tested header's text.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found (Debian: libopenblas-dev); skipping the composition tests")
  return()
endif()

fusor_add_test_suite(composition
  EXECUTOR_TESTS
    nn/test_composition.cpp
    nn/test_composition_training.cpp
    nn/test_swiglu.cpp
  HOST_TESTS
    nn/test_composition_gradients.cpp
    nn/test_composition_parallel.cpp
  LIBRARIES fusor::blas
)

# compile_fail.composition_<name>: as nn.cmake's compile_fail.nn_<name>.
# A residual whose layers change the features: both features named.
fusor_compile_test(composition_residual_changes_features nn/compile_fail/residual_changes_features.cpp fail
  "nn::residual: the layers inside must give back the features they get"
  "residual_features_must_match<Input, BlockOutput, Match>::check.. .with Input = fusor::nn::features<16>; BlockOutput = fusor::nn::features<32>"
  COMPILERS cxx)
# A mismatch between two layers inside a residual: as sequential<> reports it,
# the chain's input standing for the network's (the chain's input rule, raised
# at nn::network's constructor).
fusor_compile_test(composition_residual_inner_mismatch nn/compile_fail/residual_inner_mismatch.cpp fail
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<1, fusor::nn::linear<16, 32, fusor::nn::elementwise<fusor::nn::functions::relu> >, fusor::nn::linear<16, 16>, fusor::nn::features<32>, fusor::nn::features<16>"
  COMPILERS cxx)
# The same inside a recomputed chain that is a branch: two composites deep, still
# one error at the network's constructor.
fusor_compile_test(composition_branch_inner_mismatch nn/compile_fail/branch_inner_mismatch.cpp fail
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<1, fusor::nn::linear<5, 6, fusor::nn::elementwise<fusor::nn::functions::relu> >, fusor::nn::linear<8, 4>, fusor::nn::features<6>, fusor::nn::features<8>"
  COMPILERS cxx)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the composition tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(composition SOURCES nn/test_composition_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 TIMEOUT 600 ONE_THREAD_PER_RANK)
target_compile_definitions(fusor_composition_mpi_tests PRIVATE FUSOR_COMPOSITION_MPI=1)
