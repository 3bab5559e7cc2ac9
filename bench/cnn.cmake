# The CNN's training step on the host (issue 4, nn/conv2d.hpp and friends):
# examples/fashion_mnist_cnn.cpp's network at batch 128, the whole trainer step
# and each layer alone; bench/cnn_torch.py times the same step in PyTorch.
# Included by bench/CMakeLists.txt, which has already looked for Google Benchmark.
#   OMP_WAIT_POLICY=passive build/bench/bench_cnn_host --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#   OMP_WAIT_POLICY=passive /usr/bin/python3 bench/cnn_torch.py
if(NOT FUSOR_BLAS_FOUND OR NOT benchmark_FOUND)
  message(STATUS "fusor: OpenBLAS or Google Benchmark missing; skipping bench_cnn_host")
  return()
endif()

add_executable(bench_cnn_host ${CMAKE_CURRENT_LIST_DIR}/cnn_host.cpp)
target_link_libraries(bench_cnn_host PRIVATE fusor::blas benchmark::benchmark)
target_compile_options(bench_cnn_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
