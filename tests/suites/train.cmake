# Training end to end (optim::trainer, issue 4): resume equals uninterrupted
# training, a short run on a Fashion-MNIST slice learns, pruning persists;
# app::fit, the library's training loop (issue 16).
if(NOT FUSOR_BLAS_FOUND OR NOT FUSOR_DATA_FOUND)
  message(STATUS "fusor: OpenBLAS or zlib not found; skipping the training tests")
  return()
endif()

fusor_add_test_suite(train
  EXECUTOR_TESTS
    train/test_trainer.cpp
    train/test_fit.cpp
  LIBRARIES fusor::blas fusor::data
)
