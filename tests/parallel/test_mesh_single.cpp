// parallel::mesh's layout on the host: coordinates and world ranks round trip
// for every shape of 8 and 12 ranks, tensor fastest, then data, then pipeline;
// a mesh over comm::single; the errors (a bad shape, a tensor group across machines).
#include <fusor/comm/single.hpp>

#include "parallel/mesh_checks.hpp"

using namespace fusor;

TEST_CASE("mesh layout: world rank <-> coordinates, tensor fastest, then data, then pipeline") {
  for (int n : {8, 12})
    for (const auto& shape : mesh_test::shapes_of(n)) {
      INFO(parallel::to_string(shape));
      std::vector<bool> seen(std::size_t(n), false);
      for (int p = 0; p < shape.pipeline; ++p)
        for (int d = 0; d < shape.data; ++d)
          for (int t = 0; t < shape.tensor; ++t) {
            const int r = parallel::rank_of({d, t, p}, shape);
            REQUIRE(r >= 0);
            REQUIRE(r < n);
            CHECK(!seen[std::size_t(r)]);
            seen[std::size_t(r)] = true;
            CHECK(parallel::coordinates_of(r, shape) == parallel::mesh_coordinates{d, t, p});
          }
    }
  // 2 x 2 x 2: ranks 0, 1 are a tensor group; 0 and 2 a data group; 0 and 4 a pipeline group.
  const parallel::mesh_shape cube{2, 2, 2};
  CHECK(parallel::coordinates_of(1, cube) == parallel::mesh_coordinates{0, 1, 0});
  CHECK(parallel::coordinates_of(2, cube) == parallel::mesh_coordinates{1, 0, 0});
  CHECK(parallel::coordinates_of(4, cube) == parallel::mesh_coordinates{0, 0, 1});
}

TEST_CASE("mesh over comm::single: one rank in every group") {
  mesh_test::check_mesh(comm::single{}, {1, 1, 1});
}

TEST_CASE("mesh errors: a shape of another size, an empty dimension, a tensor group across machines") {
  fusor_test::expect_error<error>([] { parallel::mesh<comm::single> grid(comm::single{}, {2, 1, 1}); },
                                  {"2 (data) x 1 (tensor) x 1 (pipeline) is 2 ranks", "has 1"});
  fusor_test::expect_error<error>([] { parallel::mesh<comm::single> grid(comm::single{}, {1, 0, 1}); },
                                  {"at least 1 rank"});
  // Machines of 3 ranks each, tensor groups of 2: ranks 2 and 3 straddle the first two machines.
  const std::vector<std::int32_t> machines{7, 7, 7, 9, 9, 9};
  const std::string problem = parallel::tensor_groups_across_machines(machines, {3, 2, 1});
  CHECK(problem.find("world ranks 2 to 3 spans machines") != std::string::npos);
  CHECK(problem.find("a multiple of 2 ranks per machine") != std::string::npos);
  CHECK(parallel::tensor_groups_across_machines({7, 7, 9, 9}, {2, 2, 1}).empty());
}
