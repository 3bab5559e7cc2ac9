# Row-wise kernels (issue 3): softmax, layernorm, fused cross-entropy.
# Included by bench/CMakeLists.txt, which has already looked for Google Benchmark.
#   build/bench/bench_rowwise_host --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#   python3 bench/rowwise_torch.py          (PyTorch on the CPU, same shapes; Debian python3-torch)
#   build/bench/bench_rowwise_cuda          (a GPU: bytes/s against the measured copy bandwidth)
if(benchmark_FOUND)
  add_executable(bench_rowwise_host ${CMAKE_CURRENT_LIST_DIR}/rowwise_host.cpp)
  target_link_libraries(bench_rowwise_host PRIVATE fusor::fusor benchmark::benchmark)
  target_compile_options(bench_rowwise_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
else()
  message(STATUS "fusor: Google Benchmark not found (Debian: libbenchmark-dev); skipping bench_rowwise_host")
endif()

if(FUSOR_ENABLE_CUDA)
  add_executable(bench_rowwise_cuda ${CMAKE_CURRENT_LIST_DIR}/rowwise_cuda.cu)
  target_link_libraries(bench_rowwise_cuda PRIVATE fusor::fusor)
  list(JOIN FUSOR_BENCH_HOST_FLAGS "," rowwise_host_flags)
  target_compile_options(bench_rowwise_cuda PRIVATE -O3 -Xcompiler=${rowwise_host_flags})
endif()
