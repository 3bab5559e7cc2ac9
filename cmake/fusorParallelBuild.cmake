# Build helpers for fusor's programs of several processes (issue 5): the tests,
# examples and benchmarks that run over MPI ranks or over NCCL. Finding NCCL,
# the mpirun command line and the MPI benchmark target are written here once.
# Included by tests/CMakeLists.txt, examples/CMakeLists.txt and bench/*.cmake;
# not installed: a project using fusor links fusor::mpi and finds NCCL itself.
include_guard(GLOBAL)

# fusor_find_nccl(): NCCL's header and library, looked for beside the CUDA
# Toolkit. Sets FUSOR_NCCL_FOUND in the caller's scope and the cache entries
# FUSOR_NCCL_INCLUDE_DIR and FUSOR_NCCL_LIBRARY. Only programs compiled by nvcc
# use NCCL, so without FUSOR_ENABLE_CUDA it is not looked for.
function(fusor_find_nccl)
  set(FUSOR_NCCL_FOUND FALSE PARENT_SCOPE)
  if(NOT FUSOR_ENABLE_CUDA)
    return()
  endif()
  find_package(CUDAToolkit)
  find_path(FUSOR_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(FUSOR_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(FUSOR_NCCL_INCLUDE_DIR AND FUSOR_NCCL_LIBRARY)
    set(FUSOR_NCCL_FOUND TRUE PARENT_SCOPE)
  endif()
endfunction()

# fusor_mpiexec(<variable> <ranks>): sets <variable> to the command that runs a
# program as <ranks> MPI processes. As root OpenMPI needs --allow-run-as-root;
# --oversubscribe runs more ranks than there are cores.
function(fusor_mpiexec variable ranks)
  set(${variable} ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe ${MPIEXEC_NUMPROC_FLAG} ${ranks}
      PARENT_SCOPE)
endfunction()

# fusor_add_mpi_test(<name> RANKS <n> TIMEOUT <seconds> [ONE_THREAD_PER_RANK]
#                    COMMAND <program> [arguments...])
# makes the ctest test <name>: <program> run as <n> MPI processes. TIMEOUT is
# required: a rank that hangs must not hold ctest for its default 1500 s.
# ONE_THREAD_PER_RANK sets OMP_NUM_THREADS and OPENBLAS_NUM_THREADS to 1: with
# more ranks than cores, one thread per rank is fastest.
function(fusor_add_mpi_test name)
  cmake_parse_arguments(PARSE_ARGV 1 test "ONE_THREAD_PER_RANK" "RANKS;TIMEOUT" "COMMAND")
  if(NOT test_RANKS OR NOT test_TIMEOUT OR NOT test_COMMAND)
    message(FATAL_ERROR "fusor_add_mpi_test(${name}): RANKS, TIMEOUT and COMMAND are required")
  endif()
  fusor_mpiexec(mpiexec ${test_RANKS})
  add_test(NAME ${name} COMMAND ${mpiexec} ${test_COMMAND})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${test_TIMEOUT})
  if(test_ONE_THREAD_PER_RANK)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
  endif()
endfunction()

# fusor_add_mpi_bench(<target> <source>): a benchmark of several processes, run
# under mpirun by hand (bench/RESULTS.md), linked to fusor::blas and fusor::mpi
# and built with the benchmarks' flags; skipped, saying so, where OpenBLAS or
# MPI is missing.
function(fusor_add_mpi_bench target source)
  if(NOT FUSOR_BLAS_FOUND OR NOT FUSOR_MPI_FOUND)
    message(STATUS "fusor: OpenBLAS or MPI missing; skipping ${target}")
    return()
  endif()
  add_executable(${target} ${source})
  target_link_libraries(${target} PRIVATE fusor::blas fusor::mpi)
  target_compile_options(${target} PRIVATE ${FUSOR_BENCH_HOST_FLAGS})
endfunction()
