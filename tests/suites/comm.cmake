# Communicators (fusor/comm/, issue 5). The single communicator's checks always
# run; the MPI communicator's run the same checks under mpirun -np 2, 3 and 4
# (OpenMPI, Debian: libopenmpi-dev openmpi-bin), plus a job in which one rank
# throws and every rank must end (MPI_Abort) instead of hanging. The NCCL
# communicator runs its one-GPU test where CUDA, NCCL and a GPU are.
# The NCCL communicator's host-side policies (waiting under a timeout, choosing
# the device) are plain C++ and run here too.
fusor_add_test_suite(comm HOST_TESTS comm/test_single.cpp comm/test_nccl_watchdog.cpp comm/test_device_choice.cpp)

# The NCCL communicator (nvcc, device memory): one rank over one GPU; compiled
# wherever CUDA and NCCL are found, run (not skipped) only where a GPU is.
fusor_add_nccl_test(comm SOURCES comm/test_nccl.cu)
if(FUSOR_ENABLE_CUDA AND NOT FUSOR_NCCL_FOUND)
  message(STATUS "fusor: NCCL not found (nccl.h and libnccl); skipping the NCCL communicator's test")
endif()

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found (Debian: libopenmpi-dev openmpi-bin); skipping the MPI communicator's tests")
  return()
endif()

fusor_add_mpi_test_suite(comm SOURCES comm/test_mpi.cpp
  RANKS 2 3 4  # 3: an odd number of ranks
  TIMEOUT 300)

# Rank 1 throws while rank 0 waits in a collective: the job must end, non-zero,
# naming rank 1 — through run_ranks, and through a bare mpi_environment.
set(comm_src ${CMAKE_CURRENT_LIST_DIR}/..)
add_executable(fusor_comm_mpi_abort ${comm_src}/comm/mpi_abort.cpp)
target_link_libraries(fusor_comm_mpi_abort PRIVATE fusor::mpi doctest::doctest)
target_include_directories(fusor_comm_mpi_abort PRIVATE ${comm_src})
target_compile_options(fusor_comm_mpi_abort PRIVATE -Wall -Wextra)
fusor_mpiexec(mpiexec_np2 2)
foreach(way run_ranks environment)
  if(way STREQUAL "run_ranks")
    set(expected "rank 1 failed: deliberate")
    set(argument "")
  else()
    set(expected "rank 1: an exception is leaving")
    set(argument environment)
  endif()
  add_test(NAME comm_mpi_abort_${way} COMMAND sh -c "out=$(timeout 60 \"$0\" \"$@\" 2>&1); rc=$?; echo \"$out\"; [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo \"$out\" | grep -q '${expected}'"
    ${mpiexec_np2} $<TARGET_FILE:fusor_comm_mpi_abort> ${argument})
  set_tests_properties(comm_mpi_abort_${way} PROPERTIES TIMEOUT 90)
endforeach()
