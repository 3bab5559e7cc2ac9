// parallel::mesh over comm::mpi under mpirun (8 ranks, and 4): every split of
// the world into data x tensor x pipeline (8: the seven of issue 14 among the
// ten), each group holding the ranks the layout says; a shape of another size
// is an error on every rank.
#include <string>

#include "comm/mpi_world.hpp"
#include "parallel/mesh_checks.hpp"

TEST_CASE("mesh over MPI: every data x tensor x pipeline split of the world") {
  auto& world = comm_test::world();
  for (const auto& shape : mesh_test::shapes_of(world.size())) mesh_test::check_mesh(world, shape);
}

TEST_CASE("mesh over MPI: a shape of another size is an error naming both sizes") {
  auto& world = comm_test::world();
  const std::string has = "has " + std::to_string(world.size());
  fusor_test::expect_error<fusor::error>(
      [&] { fusor::parallel::mesh<fusor::comm::mpi> grid(world, {.data = 3, .tensor = 1, .pipeline = 1}); },
      {"3 (data) x 1 (tensor) x 1 (pipeline) is 3 ranks", has.c_str()});
}
