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
set(_matmul_compile_flags -std=c++20 -I${PROJECT_SOURCE_DIR}/include)
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS _fusor_cblas_include_dirs)
  list(APPEND _matmul_compile_flags -isystem ${dir})
  if(EXISTS ${dir}/cccl)
    list(APPEND _matmul_compile_flags -isystem ${dir}/cccl)
  endif()
endforeach()
function(_matmul_compile_test name source)
  set(script ${CMAKE_CURRENT_BINARY_DIR}/compile_fail_${name}.cmake)
  set(content "set(COMPILER [==[${CMAKE_CXX_COMPILER}]==])\n")
  string(APPEND content "set(SOURCE [==[${PROJECT_SOURCE_DIR}/tests/kernels/${source}]==])\nset(MODE fail)\nset(FLAGS)\n")
  foreach(flag IN LISTS _matmul_compile_flags)
    string(APPEND content "list(APPEND FLAGS [==[${flag}]==])\n")
  endforeach()
  string(APPEND content "set(REASON \"\")\nset(PATTERNS)\n")
  foreach(pattern IN LISTS ARGN)
    string(APPEND content "list(APPEND PATTERNS [==[${pattern}]==])\n")
  endforeach()
  string(APPEND content "include([==[${PROJECT_SOURCE_DIR}/tests/compile_fail/run_compile_test.cmake]==])\n")
  file(CONFIGURE OUTPUT ${script} CONTENT "${content}")
  add_test(NAME compile_fail.${name} COMMAND ${CMAKE_COMMAND} -P ${script})
endfunction()
_matmul_compile_test(matmul_static_shapes test_matmul_static_shapes.cpp
  "static shapes do not agree"
  "static_matmul_shapes_must_agree<fusor::shape<4, 3>, fusor::shape<4, 6>, fusor::shape<5, 3>")
_matmul_compile_test(matmul_unsupported_types test_matmul_static_types.cpp
  "a and b must store the same element type")
