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

# compile_fail.composition_<name>: tests/nn/compile_fail/<name>.cpp must fail
# with FUSOR_COMPILE_FAIL (fusor's message first, every pattern matched) and
# compile without it (tests/compile_fail/run_compile_test.cmake), in at most 5
# message lines (issue 16; MAX_LINES n would allow more).
set(_composition_compile_flags -std=c++20 -I${PROJECT_SOURCE_DIR}/include)
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS _fusor_cblas_include_dirs)
  list(APPEND _composition_compile_flags -isystem ${dir})
  if(EXISTS ${dir}/cccl)
    list(APPEND _composition_compile_flags -isystem ${dir}/cccl)
  endif()
endforeach()
function(_composition_compile_fail name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "MAX_LINES" "")
  set(_script ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_composition_${name}.cmake)
  set(_content "set(COMPILER [==[${CMAKE_CXX_COMPILER}]==])\nset(SOURCE [==[${PROJECT_SOURCE_DIR}/tests/nn/compile_fail/${name}.cpp]==])\nset(MODE fail)\nset(FLAGS)\n")
  foreach(flag IN LISTS _composition_compile_flags)
    string(APPEND _content "list(APPEND FLAGS [==[${flag}]==])\n")
  endforeach()
  string(APPEND _content "set(REASON \"\")\nset(PATTERNS)\n")
  foreach(pattern IN LISTS arg_UNPARSED_ARGUMENTS)
    string(APPEND _content "list(APPEND PATTERNS [==[${pattern}]==])\n")
  endforeach()
  if(arg_MAX_LINES)
    string(APPEND _content "set(MAX_LINES ${arg_MAX_LINES})\n")
  endif()
  string(APPEND _content "include([==[${PROJECT_SOURCE_DIR}/tests/compile_fail/run_compile_test.cmake]==])\n")
  file(CONFIGURE OUTPUT ${_script} CONTENT "${_content}")
  add_test(NAME compile_fail.composition_${name} COMMAND ${CMAKE_COMMAND} -P ${_script})
endfunction()

# A residual whose layers change the features: both features named.
_composition_compile_fail(residual_changes_features
  "nn::residual: the layers inside must give back the features they get"
  "residual_features_must_match<Input, BlockOutput, Match>::check.. .with Input = fusor::nn::features<16>; BlockOutput = fusor::nn::features<32>")
# A mismatch between two layers inside a residual: as sequential<> reports it,
# the chain's input standing for the network's (the chain's input rule, raised
# at nn::network's constructor).
_composition_compile_fail(residual_inner_mismatch
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<1, fusor::nn::linear<16, 32, fusor::nn::elementwise<fusor::nn::functions::relu> >, fusor::nn::linear<16, 16>, fusor::nn::features<32>, fusor::nn::features<16>")
# The same inside a recomputed chain that is a branch: two composites deep, still
# one error at the network's constructor.
_composition_compile_fail(branch_inner_mismatch
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<1, fusor::nn::linear<5, 6, fusor::nn::elementwise<fusor::nn::functions::relu> >, fusor::nn::linear<8, 4>, fusor::nn::features<6>, fusor::nn::features<8>")

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the composition tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(composition SOURCES nn/test_composition_parallel.cpp LIBRARIES fusor::blas
  RANKS 2 TIMEOUT 600 ONE_THREAD_PER_RANK)
target_compile_definitions(fusor_composition_mpi_tests PRIVATE FUSOR_COMPOSITION_MPI=1)
