# Reductions (issue 3): sum, mean, amax, amin, argmax, argmin, sum_of_squares
# and norm, whole-tensor and along an axis, against fp64 references; their
# semantics (NaN, ties, determinism, shape errors, one read per element).
fusor_add_test_suite(reduce
  EXECUTOR_TESTS
    kernels/test_reduce.cpp
    kernels/test_reduce_semantics.cpp
)
# Kernel bodies run under the SIMT emulator here: every 16-byte vector access
# they make is checked for the alignment the GPU needs.
if(TARGET fusor_reduce_tests)
  target_compile_definitions(fusor_reduce_tests PRIVATE FUSOR_CHECK_VECTOR_ALIGNMENT=1)
endif()
