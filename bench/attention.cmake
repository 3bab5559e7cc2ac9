# Causal self-attention on the host (issue 13) against PyTorch's CPU attention:
#   build/bench/bench_attention_host --benchmark_repetitions=5 --benchmark_out=attention.json --benchmark_out_format=json
#   /usr/bin/python3 bench/attention_pytorch.py --fusor attention.json
# Included by bench/CMakeLists.txt, which has already looked for Google Benchmark.
if(benchmark_FOUND)
  add_executable(bench_attention_host ${CMAKE_CURRENT_LIST_DIR}/bench_attention_host.cpp)
  target_link_libraries(bench_attention_host PRIVATE fusor::fusor benchmark::benchmark)
  target_compile_options(bench_attention_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
else()
  message(STATUS "fusor: Google Benchmark not found (Debian: libbenchmark-dev); skipping bench_attention_host")
endif()
