# The device mesh (fusor/parallel/mesh.hpp, issue 14): data x tensor x pipeline
# ranks over one world communicator. Its layout and errors on the host and over
# comm::single; every split of 8 (and 4) ranks under mpirun, each group holding
# the ranks the layout says; data x tensor training against one process.
# Distributed checkpoints (fusor/parallel/distributed_checkpoint.hpp): saved on
# one mesh, resumed on the same (bit for bit), on one process and on another mesh.
fusor_add_test_suite(parallel_mesh HOST_TESTS parallel/test_mesh_single.cpp)

if(NOT FUSOR_BLAS_FOUND)
  message(STATUS "fusor: OpenBLAS not found; skipping the mesh training and distributed checkpoint tests")
  if(FUSOR_MPI_FOUND)
    fusor_add_mpi_test_suite(parallel_mesh SOURCES parallel/test_mesh.cpp RANKS 4 8 TIMEOUT 120 ONE_THREAD_PER_RANK)
  endif()
  return()
endif()
fusor_add_test_suite(parallel_checkpoint HOST_TESTS parallel/test_distributed_checkpoint_single.cpp LIBRARIES fusor::blas)
# Crash-safe saving (issue 15): a training process killed with SIGKILL 200 times
# (seeded) while it saves; the newest complete save must always load and resume.
add_executable(fusor_kill_during_save ${CMAKE_CURRENT_LIST_DIR}/../parallel/kill_during_save.cpp)
target_link_libraries(fusor_kill_during_save PRIVATE fusor::fusor fusor::blas)
target_compile_options(fusor_kill_during_save PRIVATE -Wall -Wextra)
add_test(NAME parallel_checkpoint_kill COMMAND fusor_kill_during_save 200)
set_tests_properties(parallel_checkpoint_kill PROPERTIES TIMEOUT 300)

if(NOT FUSOR_MPI_FOUND)
  message(STATUS "fusor: MPI not found; skipping the mesh and distributed checkpoint tests under mpirun")
  return()
endif()
fusor_add_mpi_test_suite(parallel_mesh SOURCES parallel/test_mesh.cpp parallel/test_mesh_training.cpp
  LIBRARIES fusor::blas RANKS 4 8 TIMEOUT 300 ONE_THREAD_PER_RANK)
fusor_add_mpi_test_suite(parallel_checkpoint SOURCES parallel/test_distributed_checkpoint.cpp
  LIBRARIES fusor::blas RANKS 4 8 TIMEOUT 300 ONE_THREAD_PER_RANK)
