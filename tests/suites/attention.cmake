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
