# Data parallelism on the host (issue 5): the MLP's step over 1, 2 and 4 MPI
# ranks, bucket sizes, overlap on and off, bf16 communication, ZeRO-1, bytes per
# step. A plain program (every rank must run the same steps; Google Benchmark
# picks iteration counts per process). Run, for N in 1 2 4:
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
#     mpirun --allow-run-as-root --oversubscribe -np N build/bench/bench_data_parallel_host
if(NOT FUSOR_BLAS_FOUND OR NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: OpenBLAS or MPI missing; skipping bench_data_parallel_host")
  return()
endif()

add_executable(bench_data_parallel_host ${CMAKE_CURRENT_LIST_DIR}/data_parallel_host.cpp)
target_link_libraries(bench_data_parallel_host PRIVATE fusor::blas fusor::mpi)
target_compile_options(bench_data_parallel_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
