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

# compile_fail.nn_<name>: tests/nn/compile_fail/<name>.cpp must fail with
# fusor's message first and every pattern (in g++'s words, so g++ only), in at
# most 5 message lines, and compile without FUSOR_COMPILE_FAIL
# (tests/compile_fail/compile_test.cmake).
fusor_compile_test(nn_sequential_mismatch nn/compile_fail/sequential_mismatch.cpp fail
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<1, fusor::nn::linear<784, 256, fusor::nn::elementwise<fusor::nn::functions::relu> >, fusor::nn::linear<128, 10>, fusor::nn::features<256>, fusor::nn::features<128>"
  COMPILERS cxx)
# A convolution given images with other channels: the layer and both shapes named.
fusor_compile_test(nn_conv_channels_mismatch nn/compile_fail/conv_channels_mismatch.cpp fail
  "a layer's input does not match the previous layer's output"
  "layer_sizes_must_match<0, fusor::nn::network_input, fusor::nn::conv2d<1, 4, 3>, fusor::nn::features<3, 8, 8>, fusor::nn::features<1, 3, 3>"
  COMPILERS cxx)
# A kernel larger than the padded image it gets: the kernel, padding and image named.
fusor_compile_test(nn_conv_kernel_too_large nn/compile_fail/conv_kernel_too_large.cpp fail
  "the kernel is larger than the padded image; make the kernel smaller"
  "conv_kernel_must_fit_the_padded_image<Kernel, Padding, Height, Width, Fits>::check.. .with long unsigned int Kernel = 5; long unsigned int Padding = 0; long unsigned int Height = 4; long unsigned int Width = 4"
  COMPILERS cxx)
# A layout the layer does not have: refused, not ignored.
fusor_compile_test(nn_linear_other_layout nn/compile_fail/linear_other_layout.cpp fail MAX_LINES 8
  "every layer has one layout yet, its default"
  COMPILERS cxx)
# A pooling window larger than the image it gets: the window and the image named.
fusor_compile_test(nn_pool_window_too_large nn/compile_fail/pool_window_too_large.cpp fail
  "the pooling window is larger than the image; make the window smaller or the image larger"
  "pool_window_must_fit_the_image<Window, Height, Width, Fits>::check.. .with long unsigned int Window = 3; long unsigned int Height = 2; long unsigned int Width = 2"
  COMPILERS cxx)
