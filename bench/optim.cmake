# Optimizers (issue 4): one AdamW step over 10M parameters on the host, fusor's
# fused pass against a hand-written loop (Google Benchmark). Included by
# bench/CMakeLists.txt, which has already looked for benchmark.
#   build/bench/bench_optim_host --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
# Built twice: with the benchmark flags as they are, and with -fno-math-errno
# added (both sides alike). Without it GCC keeps sqrt's errno check, a branch
# that stops it vectorising any loop that takes a square root, fused or not.
if(benchmark_FOUND)
  add_executable(bench_optim_host ${CMAKE_CURRENT_LIST_DIR}/optim_host.cpp)
  target_link_libraries(bench_optim_host PRIVATE fusor::fusor benchmark::benchmark)
  target_compile_options(bench_optim_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
  add_executable(bench_optim_host_no_errno ${CMAKE_CURRENT_LIST_DIR}/optim_host.cpp)
  target_link_libraries(bench_optim_host_no_errno PRIVATE fusor::fusor benchmark::benchmark)
  target_compile_options(bench_optim_host_no_errno PRIVATE ${FUSOR_BENCH_HOST_FLAGS} -fno-math-errno)
else()
  message(STATUS "fusor: Google Benchmark missing; skipping bench_optim_host")
endif()
