// The pipeline under mpirun (one stage per rank, -np 2 and -np 4): GPipe and
// 1F1B with 1 to 6 micro-batches, the balanced and an uneven stage map, and
// clipping, each equal to optim::trainer on the whole network after several
// AdamW steps; report(); start-up errors, among them more stages than layers.
#include <fusor/comm/mpi.hpp>

#include "comm/mpi_world.hpp"
#include "parallel/pipeline_checks.hpp"

using namespace pipeline_test;

TEST_CASE("pipeline (comm::mpi): GPipe and 1F1B train as optim::trainer does") {
  auto& world = comm_test::world();
  CHECK(world.size() >= 2);
  check_training_cases(world, executor{});
}

TEST_CASE("pipeline (comm::mpi): report") { check_report(comm_test::world(), executor{}); }

TEST_CASE("pipeline (comm::mpi): start-up errors") { check_startup_errors(comm_test::world(), executor{}); }
