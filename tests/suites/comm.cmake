# Communicators (fusor/comm/, issue 5). The single communicator's checks always
# run; the MPI communicator's run the same checks under mpirun -np 2 and -np 4
# (OpenMPI, Debian: libopenmpi-dev openmpi-bin), plus a job in which one rank
# throws and every rank must end (MPI_Abort) instead of hanging.
fusor_add_test_suite(comm HOST_TESTS comm/test_single.cpp)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found (Debian: libopenmpi-dev openmpi-bin); skipping the MPI communicator's tests")
  return()
endif()

set(comm_src ${CMAKE_CURRENT_LIST_DIR}/..)
add_executable(fusor_comm_mpi_tests ${comm_src}/comm/mpi_main.cpp ${comm_src}/comm/test_mpi.cpp)
add_executable(fusor_comm_mpi_abort ${comm_src}/comm/mpi_abort.cpp)
foreach(target fusor_comm_mpi_tests fusor_comm_mpi_abort)
  target_link_libraries(${target} PRIVATE fusor::mpi doctest::doctest)
  target_include_directories(${target} PRIVATE ${comm_src})
  target_compile_options(${target} PRIVATE -Wall -Wextra)
endforeach()

# As root OpenMPI needs --allow-run-as-root; --oversubscribe runs 4 ranks on fewer cores.
set(FUSOR_MPIEXEC ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe)
foreach(ranks 2 4)
  add_test(NAME comm_mpi_np${ranks} COMMAND ${FUSOR_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${ranks} $<TARGET_FILE:fusor_comm_mpi_tests>)
  set_tests_properties(comm_mpi_np${ranks} PROPERTIES TIMEOUT 300)
endforeach()
# Rank 1 throws while rank 0 waits in a collective: the job must end, non-zero, naming rank 1.
add_test(NAME comm_mpi_abort COMMAND sh -c "out=$(timeout 60 \"$0\" \"$@\" 2>&1); rc=$?; echo \"$out\"; [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo \"$out\" | grep -q 'rank 1 failed: deliberate'"
  ${FUSOR_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:fusor_comm_mpi_abort>)
set_tests_properties(comm_mpi_abort PROPERTIES TIMEOUT 90)
