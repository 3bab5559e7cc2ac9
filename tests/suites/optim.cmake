# Optimizers (issue 4): SGD and AdamW in one fused pass with fp32 master
# weights, clipping by global norm, learning-rate schedules, the dynamic loss
# scaler (all per-step decisions in device memory), the gradient norm's sum of
# squares and magnitude pruning.
fusor_add_test_suite(optim
  EXECUTOR_TESTS
    optim/test_sgd.cpp
    optim/test_adamw.cpp
    optim/test_schedule.cpp
    optim/test_gradient_norm.cpp
    optim/test_clipping.cpp
    optim/test_loss_scaler.cpp
    optim/test_pruning.cpp
    optim/test_step_scalars.cpp
)
# Kernel bodies run under the SIMT emulator here: every 16-byte vector access
# they make is checked for the alignment the GPU needs.
if(TARGET fusor_optim_tests)
  target_compile_definitions(fusor_optim_tests PRIVATE FUSOR_CHECK_VECTOR_ALIGNMENT=1)
endif()
