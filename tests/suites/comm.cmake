# Communicators (fusor/comm/, issue 5). The single communicator's checks always
# run; the MPI communicator's run the same checks under mpirun -np 2, 3 and 4
# (OpenMPI, Debian: libopenmpi-dev openmpi-bin), plus a job in which one rank
# throws and every rank must end (MPI_Abort) instead of hanging. The NCCL
# communicator runs its one-GPU test where CUDA, NCCL and a GPU are.
fusor_add_test_suite(comm HOST_TESTS comm/test_single.cpp)
set(comm_src ${CMAKE_CURRENT_LIST_DIR}/..)

# The NCCL communicator (nvcc, device memory): one rank over one GPU; compiled
# wherever CUDA and NCCL are found, run (not skipped) only where a GPU is.
if(FUSOR_ENABLE_CUDA)
  find_package(CUDAToolkit)
  find_path(FUSOR_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(FUSOR_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  if(FUSOR_NCCL_INCLUDE_DIR AND FUSOR_NCCL_LIBRARY)
    add_executable(fusor_comm_nccl_tests ${comm_src}/cuda_main.cu ${comm_src}/comm/test_nccl.cu)
    target_link_libraries(fusor_comm_nccl_tests PRIVATE fusor::fusor doctest::doctest ${FUSOR_NCCL_LIBRARY})
    target_include_directories(fusor_comm_nccl_tests PRIVATE ${comm_src} ${FUSOR_NCCL_INCLUDE_DIR})
    target_compile_definitions(fusor_comm_nccl_tests PRIVATE FUSOR_TEST_CUDA=1)
    add_test(NAME comm_nccl_cuda COMMAND fusor_comm_nccl_tests)
    set_tests_properties(comm_nccl_cuda PROPERTIES SKIP_RETURN_CODE 77)
  else()
    message(STATUS "fusor: NCCL not found (nccl.h and libnccl); skipping the NCCL communicator's test")
  endif()
endif()

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found (Debian: libopenmpi-dev openmpi-bin); skipping the MPI communicator's tests")
  return()
endif()

add_executable(fusor_comm_mpi_tests ${comm_src}/comm/mpi_main.cpp ${comm_src}/comm/test_mpi.cpp)
add_executable(fusor_comm_mpi_abort ${comm_src}/comm/mpi_abort.cpp)
foreach(target fusor_comm_mpi_tests fusor_comm_mpi_abort)
  target_link_libraries(${target} PRIVATE fusor::mpi doctest::doctest)
  target_include_directories(${target} PRIVATE ${comm_src})
  target_compile_options(${target} PRIVATE -Wall -Wextra)
endforeach()

# As root OpenMPI needs --allow-run-as-root; --oversubscribe runs 4 ranks on fewer cores.
set(FUSOR_MPIEXEC ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe)
foreach(ranks 2 3 4)  # 3: an odd number of ranks
  add_test(NAME comm_mpi_np${ranks} COMMAND ${FUSOR_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} ${ranks} $<TARGET_FILE:fusor_comm_mpi_tests>)
  set_tests_properties(comm_mpi_np${ranks} PROPERTIES TIMEOUT 300)
endforeach()
# Rank 1 throws while rank 0 waits in a collective: the job must end, non-zero,
# naming rank 1 — through run_ranks, and through a bare mpi_environment.
foreach(way run_ranks environment)
  if(way STREQUAL "run_ranks")
    set(expected "rank 1 failed: deliberate")
    set(argument "")
  else()
    set(expected "rank 1: an exception is leaving")
    set(argument environment)
  endif()
  add_test(NAME comm_mpi_abort_${way} COMMAND sh -c "out=$(timeout 60 \"$0\" \"$@\" 2>&1); rc=$?; echo \"$out\"; [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo \"$out\" | grep -q '${expected}'"
    ${FUSOR_MPIEXEC} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:fusor_comm_mpi_abort> ${argument})
  set_tests_properties(comm_mpi_abort_${way} PROPERTIES TIMEOUT 90)
endforeach()

