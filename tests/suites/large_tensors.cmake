# Index ranges past 32 bits (issue 12): the cuda executor's launch arithmetic
# (host) and tensors of 2^31 + 7 elements through the elementwise, row-wise
# and reduction kernels (CUDA only; about 25 GiB of GPU memory, skipped with a
# message where it is not free). Labelled "large": `ctest -L large` runs it
# alone, `ctest -LE large` leaves it out (under compute-sanitizer, say).
fusor_add_test_suite(large_tensors
  HOST_TESTS
    exec/test_launch_shape.cpp
  CUDA_TESTS
    kernels/test_large_tensors.cu
)
if(TEST large_tensors_cuda)
  set_tests_properties(large_tensors_cuda PROPERTIES LABELS large TIMEOUT 1200)
endif()
