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

# Interoperability with the reference implementation: tests/io/interop.py runs
# Hugging Face's `safetensors` package (numpy backend) on fusor's files and the
# other way round. It needs a python3 with numpy and safetensors, and fails
# without them. The default is Debian's /usr/bin/python3, the interpreter that
# python3-numpy and scripts/common.sh's pip install serve (a pyenv or virtual
# environment python3 earlier on PATH may lack both); -DFUSOR_PYTHON=... picks another.
if(EXISTS /usr/bin/python3)
  set(_fusor_default_python /usr/bin/python3)
else()
  find_program(_fusor_default_python NAMES python3)
  if(NOT _fusor_default_python)
    set(_fusor_default_python python3)  # the test then fails, saying what is missing
  endif()
endif()
set(FUSOR_PYTHON ${_fusor_default_python} CACHE FILEPATH "Python with numpy and safetensors, for the checkpoint interop test")

fusor_add_test_suite(io_interop HOST_TESTS io/test_interop.cpp)
target_compile_definitions(fusor_io_interop_tests PRIVATE
  FUSOR_TEST_PYTHON="${FUSOR_PYTHON}"
  FUSOR_TEST_INTEROP_SCRIPT="${PROJECT_SOURCE_DIR}/tests/io/interop.py")
