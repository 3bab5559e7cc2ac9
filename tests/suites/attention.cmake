# Causal self-attention (issue 13): the fused kernels forward and backward
# against an fp64 softmax under every executor, rotary embeddings, and the
# nn::causal_attention layer's gradients against central differences (fp64,
# host; with the projections around it, so with OpenBLAS only); the
# tensor-core flash kernels run on the host by the SIMT emulator, and on the
# GPU the warp instructions they use against the emulator's (test_warp_mma.cu).
set(_attention_host_tests)
set(_attention_libraries)
if(FUSOR_BLAS_FOUND)
  set(_attention_host_tests nn/test_attention_gradients.cpp)
  set(_attention_libraries fusor::blas)
else()
  message(STATUS "fusor: OpenBLAS not found (Debian: libopenblas-dev); skipping the attention layer's gradient tests")
endif()
fusor_add_test_suite(attention
  EXECUTOR_TESTS
    kernels/test_attention.cpp
  HOST_TESTS
    kernels/test_attention_flash_emulated.cpp
    ${_attention_host_tests}
  CUDA_TESTS
    kernels/test_warp_mma.cu
  LIBRARIES ${_attention_libraries}
)
# Kernel bodies run under the SIMT emulator here: every 16-byte vector access
# they make is checked for the alignment the GPU needs.
if(TARGET fusor_attention_tests)
  target_compile_definitions(fusor_attention_tests PRIVATE FUSOR_CHECK_VECTOR_ALIGNMENT=1)
endif()

# The host kernels' register tiles are as wide as the vector registers the
# compiler may use (attention_host_blocks.hpp): SSE's 16 bytes in the suite
# above (x86-64's baseline), AVX's 32 under -mavx, as the benchmarks
# (-march=native) and users' -march builds compile them. The executor tests
# run again with -mavx2 -mfma where this machine runs AVX2.
if(TARGET fusor_attention_tests AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64)$" AND
   CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  include(CheckCXXSourceRuns)
  set(CMAKE_REQUIRED_FLAGS "-mavx2 -mfma")
  check_cxx_source_runs([=[
    int main() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 0 : 1; }
  ]=] FUSOR_HOST_RUNS_AVX2)
  unset(CMAKE_REQUIRED_FLAGS)
  if(FUSOR_HOST_RUNS_AVX2)
    add_executable(fusor_attention_avx2_tests ${CMAKE_CURRENT_LIST_DIR}/../kernels/test_attention.cpp)
    target_link_libraries(fusor_attention_avx2_tests PRIVATE fusor_test_main fusor::fusor doctest::doctest)
    fusor_host_test_defaults(fusor_attention_avx2_tests)
    target_compile_options(fusor_attention_avx2_tests PRIVATE -mavx2 -mfma)
    add_test(NAME attention_host_avx2 COMMAND fusor_attention_avx2_tests)
  endif()
endif()
