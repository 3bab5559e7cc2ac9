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
