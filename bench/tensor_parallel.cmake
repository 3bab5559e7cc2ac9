# Tensor parallelism (issue 5): the training step of a split MLP at 1, 2 and 4
# ranks over MPI on the host, with the time and bytes of its all-reduces. A
# plain MPI program printing a Markdown table (bench/RESULTS.md has the figures):
#   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
#     mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_tensor_parallel_host
if(NOT FUSOR_BLAS_FOUND OR NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: OpenBLAS or MPI missing; skipping bench_tensor_parallel_host")
  return()
endif()

add_executable(bench_tensor_parallel_host ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_host.cpp)
target_link_libraries(bench_tensor_parallel_host PRIVATE fusor::blas fusor::mpi)
target_compile_options(bench_tensor_parallel_host PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
