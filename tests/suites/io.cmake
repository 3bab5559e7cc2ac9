# Checkpoints (fusor/io/): the safetensors format, atomic writes, checkpoint
# writer and reader in every memory space (issue 4).
fusor_add_test_suite(io
  EXECUTOR_TESTS
    io/test_checkpoint.cpp
  HOST_TESTS
    io/test_safetensors.cpp
    io/test_safetensors_errors.cpp
    io/test_atomic_write.cpp
)
