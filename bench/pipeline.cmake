# Pipeline parallelism (issue 5): each stage's measured idle time against the
# bubble (p - 1) / m, GPipe and 1F1B, over MPI on the host. A plain MPI program
# printing a Markdown table (bench/RESULTS.md has the figures):
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
#     mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/bench_pipeline_host
include(fusorParallelBuild)
fusor_add_mpi_bench(bench_pipeline_host ${CMAKE_CURRENT_LIST_DIR}/pipeline_host.cpp)
