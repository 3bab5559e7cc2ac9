# Layers and networks (fusor/nn, issue 4): every layer's backward against
# central differences in fp64 on the host; networks, losses and their errors
# under every executor; a mismatched sequential<> fails to compile, naming both layers.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found (Debian: libopenblas-dev); skipping the nn tests")
  return()
endif()

fusor_add_test_suite(nn
  EXECUTOR_TESTS
    nn/test_network.cpp
    nn/test_conv2d.cpp
    nn/test_sequence_layers.cpp
    nn/test_network_stages.cpp
    nn/test_nonfinite_training.cpp
  HOST_TESTS
    nn/test_linear.cpp
    nn/test_layer_gradients.cpp
    nn/test_device_passes.cpp
  LIBRARIES fusor::blas
)

set(_nn_compile_flags -std=c++20 -I${PROJECT_SOURCE_DIR}/include)
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS _fusor_cblas_include_dirs)
  list(APPEND _nn_compile_flags -isystem ${dir})
  if(EXISTS ${dir}/cccl)
    list(APPEND _nn_compile_flags -isystem ${dir}/cccl)
  endif()
endforeach()
# One compile-fail test: tests/nn/compile_fail/<name>.cpp must fail with
# FUSOR_COMPILE_FAIL (matching every pattern) and compile without it, in at most
# 5 message lines (issue 16; MAX_LINES n raises the bound).
function(_nn_compile_fail name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "MAX_LINES" "")
  set(_script ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_nn_${name}.cmake)
  set(_content "set(COMPILER [==[${CMAKE_CXX_COMPILER}]==])\nset(SOURCE [==[${PROJECT_SOURCE_DIR}/tests/nn/compile_fail/${name}.cpp]==])\nset(MODE fail)\nset(FLAGS)\n")
  foreach(flag IN LISTS _nn_compile_flags)
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
  add_test(NAME compile_fail.nn_${name} COMMAND ${CMAKE_COMMAND} -P ${_script})
endfunction()

_nn_compile_fail(sequential_mismatch
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<1, fusor::nn::linear<784, 256, fusor::nn::elementwise<fusor::nn::functions::relu> >, fusor::nn::linear<128, 10>, fusor::nn::features<256>, fusor::nn::features<128>")
# A convolution given images with other channels: the layer and both shapes named.
_nn_compile_fail(conv_channels_mismatch
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<0, fusor::nn::network_input, fusor::nn::conv2d<1, 4, 3>, fusor::nn::features<3, 8, 8>, fusor::nn::features<1, 3, 3>")
# A kernel larger than the padded image it gets: the kernel, padding and image named.
_nn_compile_fail(conv_kernel_too_large
  "the kernel is larger than the padded image; make the kernel smaller"
  "conv_kernel_must_fit_the_padded_image<Kernel, Padding, Height, Width, Fits>::check.. .with long unsigned int Kernel = 5; long unsigned int Padding = 0; long unsigned int Height = 4; long unsigned int Width = 4")
# A pooling window larger than the image it gets: the window and the image named.
_nn_compile_fail(pool_window_too_large
  "the pooling window is larger than the image; make the window smaller or the image larger"
  "pool_window_must_fit_the_image<Window, Height, Width, Fits>::check.. .with long unsigned int Window = 3; long unsigned int Height = 2; long unsigned int Width = 2")
