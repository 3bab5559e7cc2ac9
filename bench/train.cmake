# Training-step throughput (issue 4): the MLP's trainer.step on the host against
# PyTorch on the CPU (bench/train_mlp_torch.py, same models and batches), and
# bench/train_mlp_gpu.py for a GPU machine (PyTorch eager, AMP and
# torch.compile next to fashion_mnist_mlp_cuda). Included by
# bench/CMakeLists.txt, which has already looked for Google Benchmark.
#   OMP_WAIT_POLICY=passive /usr/bin/python3 bench/train_mlp_torch.py \
#     --run build/bench/bench_train_mlp_host --rounds 10       (interleaved, table)
# A build configured with -DFUSOR_NO_MATH_ERRNO=OFF shows what sqrt's errno
# costs AdamW's pass, and so the step (bench/RESULTS.md).
if(NOT FUSOR_BLAS_FOUND OR NOT FUSOR_DATA_FOUND OR NOT benchmark_FOUND)
  message(STATUS "fusor: OpenBLAS, zlib or Google Benchmark missing; skipping bench_train_mlp_host")
  return()
endif()

add_executable(bench_train_mlp_host ${CMAKE_CURRENT_LIST_DIR}/train_mlp_host.cpp)
target_link_libraries(bench_train_mlp_host PRIVATE fusor::blas fusor::data benchmark::benchmark)
target_compile_options(bench_train_mlp_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
