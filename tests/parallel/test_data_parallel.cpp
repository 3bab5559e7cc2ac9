// parallel::data_parallel over comm::mpi under mpirun (-np 2, 3, 4): every rank
// trains its slice and also trains the one-rank reference (optim::trainer on the
// whole global batch) itself, so each compares every parameter with it: AdamW and
// SGD with momentum under every configuration (bucket per layer, two buckets,
// one huge bucket, overlap off, two micro-batches, ZeRO-1), clipping by the
// global norm (summed over ZeRO-1's shards), bf16 communication within what bf16
// rounding explains; the timeline shows overlap; memory and bytes per step match
// the arithmetic (3 ranks: ZeRO-1 pads); errors name their numbers on every rank.
#include <fusor/comm/mpi.hpp>

#include "comm/mpi_world.hpp"
#include "parallel/data_parallel_cases.hpp"
#include "parallel/data_parallel_reports.hpp"
#include "parallel/nonfinite_checks.hpp"
#include "parallel/powersgd_cases.hpp"

using namespace dp_test;
using comm_test::world;

TEST_CASE("data_parallel over MPI equals one rank with the same global batch (AdamW)") {
  check_equals_one_rank<optim::adamw>(world(), optim::adamw_options{.weight_decay = 0.01f}, "AdamW");
}

TEST_CASE("data_parallel over MPI equals one rank with the same global batch (SGD with momentum)") {
  check_equals_one_rank<optim::sgd>(world(), optim::sgd_options{.momentum = 0.9f, .weight_decay = 1e-3f}, "SGD momentum");
}

TEST_CASE("data_parallel over MPI: clipping by the global norm, also with ZeRO-1's shards") { check_clipping(world()); }

TEST_CASE("data_parallel over MPI: dropout draws one process's masks") { check_dropout_equals_one_rank(world()); }

TEST_CASE("data_parallel over MPI: bf16 communication differs only by bf16 rounding") {
  check_bf16_explained_by_rounding(world());
  check_bf16_adamw(world());
}

TEST_CASE("data_parallel over MPI: overlap shown by the timeline, buckets in reverse layer order") {
  check_timeline(world());
}

TEST_CASE("data_parallel over MPI: bucket plans, memory per rank, bytes per step") {
  check_bucket_plans(world());
  check_memory(world());
  check_memory_against_zero_paper<fp32>(world());
  check_memory_against_zero_paper<bf16>(world());
  check_zero3_uneven_evaluation(world());
}

TEST_CASE("data_parallel over MPI: bad configurations name their numbers") { check_errors(world()); }

TEST_CASE("data_parallel over MPI: accessors; a step allocates nothing once the first has run") {
  check_accessors_and_allocation(world());
}

TEST_CASE("PowerSGD over MPI: every rank's gradients against the algorithm in double") {
  check_powersgd_against_reference(world());
}

TEST_CASE("PowerSGD over MPI: data_parallel trains with it, warm-up steps uncompressed, its bytes per step") {
  check_powersgd_training(world());
}

TEST_CASE("data_parallel and pipeline over MPI: a NaN in one rank's rows stops every rank at that step") {
  nonfinite_test::check_parallel_cases(world());
}
