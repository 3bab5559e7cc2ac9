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

# The same attention on the GPU (bf16, GPT shapes), beside PyTorch's on the same card:
#   build/bench/bench_attention_cuda        (exits 77 without a GPU)
#   python3 bench/attention_torch_gpu.py    (scripts/gpu_check.sh runs both)
if(FUSOR_ENABLE_CUDA)
  add_executable(bench_attention_cuda ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cu)
  target_link_libraries(bench_attention_cuda PRIVATE fusor::fusor)
  target_compile_options(bench_attention_cuda PRIVATE -O3)
endif()
