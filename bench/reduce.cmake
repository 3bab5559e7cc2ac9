# Reductions (issue 3): host throughput against Eigen and plain loops (Google
# Benchmark), and a CUDA program timing reductions against the copy bandwidth
# (compiled with the main build; run on a GPU machine). Included by
# bench/CMakeLists.txt, which has already looked for benchmark and Eigen.
#   build/bench/bench_reduce_host --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#   build/bench/bench_reduce_cuda
if(benchmark_FOUND AND Eigen3_FOUND)
  add_executable(bench_reduce_host ${CMAKE_CURRENT_LIST_DIR}/reduce_host.cpp)
  target_link_libraries(bench_reduce_host PRIVATE fusor::fusor benchmark::benchmark Eigen3::Eigen)
  target_compile_options(bench_reduce_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
  target_compile_definitions(bench_reduce_host PRIVATE EIGEN_DONT_PARALLELIZE)
else()
  message(STATUS "fusor: Google Benchmark or Eigen 3.4 missing; skipping bench_reduce_host")
endif()

if(FUSOR_ENABLE_CUDA)
  add_executable(bench_reduce_cuda ${CMAKE_CURRENT_LIST_DIR}/reduce_cuda.cu)
  target_link_libraries(bench_reduce_cuda PRIVATE fusor::fusor)
  list(JOIN FUSOR_BENCH_HOST_FLAGS "," reduce_host_flags)
  target_compile_options(bench_reduce_cuda PRIVATE -O3 -Xcompiler=${reduce_host_flags})
endif()
