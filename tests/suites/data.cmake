# The input pipeline (fusor/data/, issue 4): IDX files raw and gzipped with
# every error case, Fashion-MNIST from the Debian package dataset-fashion-mnist,
# the seeded permutation, and the prefetching loader (host; the device loader
# against the host one under the CUDA executor). Needs fusor::data (zlib).
if(NOT FUSOR_DATA_FOUND)
  message(STATUS "fusor: zlib not found (Debian: zlib1g-dev); skipping the data tests")
  return()
endif()

fusor_add_test_suite(data
  EXECUTOR_TESTS
    data/test_loader_space.cpp
  HOST_TESTS
    data/test_idx.cpp
    data/test_fashion_mnist.cpp
    data/test_permutation.cpp
    data/test_loader.cpp
    data/test_character_corpus.cpp
  LIBRARIES fusor::data
)
