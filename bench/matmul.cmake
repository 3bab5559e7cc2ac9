# matmul's benchmarks (included by bench/CMakeLists.txt): fusor::matmul against
# OpenBLAS called directly on the host (Google Benchmark), and on the GPU
# against cuBLASLt called directly, plus an MLP block's forward and backward
# with fused epilogues against separate kernels. Both link fusor::blas.
#   build/bench/bench_matmul_host --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#   build/bench/bench_matmul_cuda
if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found (Debian: libopenblas-dev); skipping the matmul benchmarks")
  return()
endif()

if(benchmark_FOUND)
  add_executable(bench_matmul_host ${CMAKE_CURRENT_LIST_DIR}/matmul_host.cpp)
  target_link_libraries(bench_matmul_host PRIVATE fusor::blas benchmark::benchmark)
  target_compile_options(bench_matmul_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
else()
  message(STATUS "fusor: Google Benchmark not found (Debian: libbenchmark-dev); skipping bench_matmul_host")
endif()

if(FUSOR_ENABLE_CUDA)
  add_executable(bench_matmul_cuda ${CMAKE_CURRENT_LIST_DIR}/matmul_cuda.cu)
  target_link_libraries(bench_matmul_cuda PRIVATE fusor::blas)
  list(JOIN FUSOR_BENCH_HOST_FLAGS "," _matmul_host_flags)
  target_compile_options(bench_matmul_cuda PRIVATE -O3 -Xcompiler=${_matmul_host_flags})
endif()
