# Data parallelism on the host (issue 5): the MLP's step over 1, 2 and 4 MPI
# ranks, bucket sizes, overlap on and off, bf16 communication, ZeRO-1, bytes per
# step. A plain program (every rank must run the same steps; Google Benchmark
# picks iteration counts per process). Run, for N in 1 2 4:
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
#     mpirun --allow-run-as-root --oversubscribe -np N build/bench/bench_data_parallel_host
include(fusorParallelBuild)
fusor_add_mpi_bench(bench_data_parallel_host ${CMAKE_CURRENT_LIST_DIR}/data_parallel_host.cpp)
