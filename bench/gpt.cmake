# The GPT's training step on the host (issue 13) against PyTorch eager on the
# CPU (bench/gpt_torch.py, same model, batches and optimizer):
#   OMP_WAIT_POLICY=passive /usr/bin/python3 bench/gpt_torch.py --run build/bench/bench_gpt_host
if(NOT FUSOR_BLAS_FOUND OR NOT benchmark_FOUND)
  message(STATUS "fusor: OpenBLAS or Google Benchmark missing; skipping bench_gpt_host")
  return()
endif()
add_executable(bench_gpt_host ${CMAKE_CURRENT_LIST_DIR}/gpt_host.cpp)
target_link_libraries(bench_gpt_host PRIVATE fusor::blas benchmark::benchmark)
target_include_directories(bench_gpt_host PRIVATE ${PROJECT_SOURCE_DIR}/examples)
target_compile_options(bench_gpt_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
