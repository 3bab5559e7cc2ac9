# The GPT of examples/gpt_model.hpp against PyTorch (issue 13): the same
# initialisation and batches give PyTorch's losses and gradients
# (tests/train/gpt_pytorch_reference.py runs under FUSOR_PYTHON, which needs
# Debian's python3-torch and the safetensors package: scripts/common.sh
# installs both), a resumed checkpoint repeats the losses exactly, and
# generation with a key/value cache (examples/gpt_decoder.hpp) gives the
# network's logits.
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found (Debian: libopenblas-dev); skipping the GPT tests")
  return()
endif()

fusor_add_test_suite(gpt
  EXECUTOR_TESTS train/test_gpt_pytorch.cpp train/test_gpt_decoder.cpp
  LIBRARIES fusor::blas
)
foreach(target fusor_gpt_tests fusor_gpt_cuda_tests)
  if(TARGET ${target})
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/examples)
    target_compile_definitions(${target} PRIVATE
      FUSOR_TEST_PYTHON="${FUSOR_PYTHON}"
      FUSOR_TEST_GPT_SCRIPT="${PROJECT_SOURCE_DIR}/tests/train/gpt_pytorch_reference.py")
  endif()
endforeach()
