# Only in a sanitized build (FUSOR_SANITIZE; scripts/run_sanitized_tests.sh):
# test sources of other suites that exercise the headers CI's sanitized suites
# (core core_emulated io data parallel_checkpoint app comm large_tensors) do not, picked as
# the cheapest that do, so that CI runs every host header's code under
# AddressSanitizer + UndefinedBehaviorSanitizer within its time budget:
#   conv2d, im2col, max_pool2d (their per-element loops)  nn/test_device_passes.cpp
#   attention, chain, composite, embedding, layernorm,
#   position_embedding, residual, tied_linear (a GPT)     train/test_gpt_decoder.cpp
#   branches, flatten, recompute, training_checkpoint    nn/test_composition_training.cpp
#   matmul_bias_gradient                                 kernels/test_matmul_epilogue.cpp
#   gradient_norm (its kernel run by the emulator)       optim/test_gradient_norm.cpp
#   data_parallel and its parts, pipeline and its parts,
#   PowerSGD, batch_rows                                 parallel/test_data_parallel_single.cpp
#   rmsnorm                                              nn/test_token_layer_gradients.cpp
#   app/fit (the training loop: CSV, resume, early stop) train/test_fit.cpp
#   simt_emulator, warp_mma, attention_flash,
#   attention_flash_backward, attention_flash_delta
#   (the tensor-core kernels run by the emulator)        kernels/test_attention_flash_emulated.cpp
#     (ASan warns that it does not fully support swapcontext; no report so far)
# In the plain build these sources run in their own suites (nn, gpt,
# composition, matmul, parallel_data, tokens, train, attention).
if(NOT FUSOR_SANITIZE OR NOT FUSOR_BLAS_FOUND OR NOT FUSOR_DATA_FOUND)
  return()
endif()
fusor_add_test_suite(sanitize_cover
  HOST_TESTS
    nn/test_device_passes.cpp
    train/test_gpt_decoder.cpp
    nn/test_composition_training.cpp
    kernels/test_matmul_epilogue.cpp
    optim/test_gradient_norm.cpp
    parallel/test_data_parallel_single.cpp
    nn/test_token_layer_gradients.cpp
    train/test_fit.cpp
    kernels/test_attention_flash_emulated.cpp
  LIBRARIES fusor::blas fusor::data
)
target_include_directories(fusor_sanitize_cover_tests PRIVATE ${PROJECT_SOURCE_DIR}/examples)
# Sources of several suites, whose support namespaces declare the same names
# (optim_test, attention_test, ...): each compiles alone.
set_target_properties(fusor_sanitize_cover_tests PROPERTIES UNITY_BUILD OFF)
