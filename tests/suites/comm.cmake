# Communicators (fusor/comm/, issue 5). The single communicator's checks always
# run; the MPI communicator's run the same checks under mpirun -np 2, 3 and 4
# (OpenMPI, Debian: libopenmpi-dev openmpi-bin), plus a job in which one rank
# throws and every rank must end (MPI_Abort) instead of hanging. The NCCL
# communicator runs its one-GPU test where CUDA, NCCL and a GPU are.
# The NCCL communicator's host-side policies (waiting under a timeout, choosing
# the device) and the launchers' variables (comm/launch.hpp) are plain C++ and run here too.
fusor_add_test_suite(comm HOST_TESTS comm/test_single.cpp comm/test_nccl_watchdog.cpp comm/test_device_choice.cpp
                           comm/test_launch.cpp)

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

fusor_add_mpi_test_suite(comm SOURCES comm/test_mpi.cpp comm/test_mpi_watchdog.cpp
  RANKS 2 3 4  # 3: an odd number of ranks
  TIMEOUT 300)

# Jobs that must fail, each checked by tests/comm/expect_job_failure.sh: every
# rank ends within the limit, non-zero, and the output names the problem.
set(comm_src ${CMAKE_CURRENT_LIST_DIR}/..)
set(expect_job_failure ${comm_src}/comm/expect_job_failure.sh)
foreach(program mpi_abort mpi_faults)
  add_executable(fusor_comm_${program} ${comm_src}/comm/${program}.cpp)
  target_link_libraries(fusor_comm_${program} PRIVATE fusor::mpi)
  target_include_directories(fusor_comm_${program} PRIVATE ${comm_src})
  target_compile_options(fusor_comm_${program} PRIVATE -Wall -Wextra)
endforeach()
fusor_mpiexec(mpiexec_np2 2)
fusor_mpiexec(mpiexec_np4 4)

# Rank 1 throws while rank 0 waits in a collective: the job must end, naming
# rank 1 — through run_ranks, and through a bare mpi_environment.
add_test(NAME comm_mpi_abort_run_ranks
         COMMAND sh ${expect_job_failure} 60 "rank 1 failed: deliberate" ${mpiexec_np2} $<TARGET_FILE:fusor_comm_mpi_abort>)
add_test(NAME comm_mpi_abort_environment
         COMMAND sh ${expect_job_failure} 60 "rank 1: an exception is leaving"
                 ${mpiexec_np2} $<TARGET_FILE:fusor_comm_mpi_abort> environment)

# Hangs and diverging ranks (issue 14): with a 2 s timeout, a rank that sleeps
# before all_reduce #2 is named by every other rank within the timeout plus 10 s
# (with and without the collective check), and in a split communicator by its
# world rank; a rank that exits early ends the job;
# the collective check names a different call, and a different size, on both sides.
add_test(NAME comm_mpi_hang_sleep
         COMMAND sh ${expect_job_failure} 12 "all_reduce #2 .*ranks that did not arrive: 3 \\(last entered #1\\)"
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> sleep)
add_test(NAME comm_mpi_hang_sleep_checked
         COMMAND sh ${expect_job_failure} 12 "check before all_reduce #2 .*ranks that did not arrive: 3 "
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> sleep)
add_test(NAME comm_mpi_hang_split
         COMMAND sh ${expect_job_failure} 12 "all_reduce #1 .* on rank 0 \\(world rank 2\\).*did not arrive: 1 \\(world rank 3\\) \\(last entered #0\\)"
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> split)
add_test(NAME comm_mpi_hang_exit
         COMMAND sh ${expect_job_failure} 12 "process rank 3 with PID"
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> exit)
add_test(NAME comm_mpi_mismatch_call
         COMMAND sh ${expect_job_failure} 12 "rank 0 calls all_reduce #2 \\(1024 x float, sum\\), rank 1 calls all_gather #2"
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> other)
add_test(NAME comm_mpi_mismatch_size
         COMMAND sh ${expect_job_failure} 12 "rank 0 calls all_reduce #2 \\(1024 x float, sum\\), rank 1 calls all_reduce #2 \\(512 x float, sum\\)"
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> size)
# Without the check, the rank that receives the longer message names its call and the likely cause.
add_test(NAME comm_mpi_mismatch_size_unchecked
         COMMAND sh ${expect_job_failure} 12 "all_reduce #2 \\(512 x float, sum\\) failed on rank 1: MPI_ERR_TRUNCATE.*out of step.*FUSOR_MPI_CHECK_COLLECTIVES=1"
                 ${mpiexec_np4} $<TARGET_FILE:fusor_comm_mpi_faults> size)
set_tests_properties(comm_mpi_abort_run_ranks comm_mpi_abort_environment PROPERTIES TIMEOUT 120)
set_tests_properties(comm_mpi_hang_sleep comm_mpi_hang_split comm_mpi_hang_exit PROPERTIES TIMEOUT 60 ENVIRONMENT "FUSOR_MPI_TIMEOUT_S=2")
set_tests_properties(comm_mpi_hang_sleep_checked comm_mpi_mismatch_call comm_mpi_mismatch_size PROPERTIES TIMEOUT 60
                     ENVIRONMENT "FUSOR_MPI_TIMEOUT_S=2;FUSOR_MPI_CHECK_COLLECTIVES=1")
set_tests_properties(comm_mpi_mismatch_size_unchecked PROPERTIES TIMEOUT 60
                     ENVIRONMENT "FUSOR_MPI_TIMEOUT_S=10;FUSOR_MPI_CHECK_COLLECTIVES=0")
