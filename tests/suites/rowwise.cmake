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
# The kernels' bodies run under the SIMT emulator here: every 16-byte vector
# access they make is checked for the alignment the GPU needs.
if(TARGET fusor_rowwise_tests)
  target_compile_definitions(fusor_rowwise_tests PRIVATE FUSOR_CHECK_VECTOR_ALIGNMENT=1)
endif()
