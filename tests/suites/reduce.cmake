# Reductions (issue 3): sum, mean, amax, amin, argmax, argmin, sum_of_squares
# and norm, whole-tensor and along an axis, against fp64 references; their
# semantics (NaN, ties, determinism, shape errors, one read per element).
fusor_add_test_suite(reduce
  EXECUTOR_TESTS
    kernels/test_reduce.cpp
    kernels/test_reduce_semantics.cpp
)
