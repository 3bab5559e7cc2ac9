# Pipeline parallelism (issue 5): each stage's measured idle time against the
# bubble (p - 1) / m, GPipe and 1F1B, over MPI on the host. A plain MPI program
# printing a Markdown table (bench/RESULTS.md has the figures):
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
#     mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/bench_pipeline_host
if(NOT FUSOR_BLAS_FOUND OR NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: OpenBLAS or MPI missing; skipping bench_pipeline_host")
  return()
endif()

add_executable(bench_pipeline_host ${CMAKE_CURRENT_LIST_DIR}/pipeline_host.cpp)
target_link_libraries(bench_pipeline_host PRIVATE fusor::blas fusor::mpi)
target_compile_options(bench_pipeline_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
