# Tensor parallelism (issue 5): the training step of a split MLP at 1, 2 and 4
# ranks over MPI on the host, with the time and bytes of its all-reduces. A
# plain MPI program printing a Markdown table (bench/RESULTS.md has the figures):
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
#     mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_tensor_parallel_host
include(fusorParallelBuild)
fusor_add_mpi_bench(bench_tensor_parallel_host ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_host.cpp)
