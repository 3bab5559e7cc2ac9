# matmul (fusor/kernels/matmul*.hpp): OpenBLAS under the host executor,
# cuBLASLt under the CUDA executor; needs fusor::blas (OpenBLAS found).
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found (Debian: libopenblas-dev); skipping the matmul tests")
  return()
endif()

fusor_add_test_suite(matmul
  EXECUTOR_TESTS
    kernels/test_matmul.cpp
    kernels/test_matmul_epilogue.cpp
    kernels/test_matmul_errors.cpp
  HOST_TESTS
    kernels/test_matmul_gradients.cpp
  LIBRARIES fusor::blas
)

# Compile-time errors: static shapes that do not agree, unsupported element
# types. Run by tests/compile_fail/run_compile_test.cmake like the core's.
fusor_compile_test(matmul_static_shapes kernels/test_matmul_static_shapes.cpp fail
  "static shapes do not agree"
  "static_matmul_shapes_must_agree<fusor::shape<4, 3>, fusor::shape<4, 6>, fusor::shape<5, 3>"
  COMPILERS cxx)
fusor_compile_test(matmul_unsupported_types kernels/test_matmul_static_types.cpp fail
  "a and b must store the same element type"
  COMPILERS cxx)
