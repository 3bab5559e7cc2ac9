# Row-wise fused kernels (issue 3): softmax and log-softmax, layernorm and
# rmsnorm, fused softmax cross-entropy; forward and backward, host and CUDA.
fusor_add_test_suite(rowwise
  EXECUTOR_TESTS
    kernels/test_softmax.cpp
    kernels/test_layernorm.cpp
    kernels/test_cross_entropy.cpp
  HOST_TESTS
    kernels/test_row_launch.cpp
)
