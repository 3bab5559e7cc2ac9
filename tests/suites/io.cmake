# Checkpoints (fusor/io/): the safetensors format, atomic writes, checkpoint
# writer and reader in every memory space (issue 4).
fusor_add_test_suite(io
  EXECUTOR_TESTS
    io/test_checkpoint.cpp
  HOST_TESTS
    io/test_safetensors.cpp
    io/test_safetensors_errors.cpp
    io/test_atomic_write.cpp
    io/test_check_destination.cpp
    io/test_sharded_checkpoint.cpp
)

# Interoperability with the reference implementation: tests/io/interop.py runs
# Hugging Face's `safetensors` package (numpy backend) on fusor's files and the
# other way round, under FUSOR_PYTHON (tests/CMakeLists.txt).
fusor_add_test_suite(io_interop HOST_TESTS io/test_interop.cpp)
target_compile_definitions(fusor_io_interop_tests PRIVATE
  FUSOR_TEST_PYTHON="${FUSOR_PYTHON}"
  FUSOR_TEST_INTEROP_SCRIPT="${PROJECT_SOURCE_DIR}/tests/io/interop.py")
