// tests/parallel/mesh_checks.hpp — what a mesh over any host communicator must
// satisfy, for every shape whose size is the world's: this rank's coordinates,
// and each group (tensor, data, pipeline) holding exactly the world ranks that
// share the other two coordinates, in the order of its own coordinate (an
// all-gather of world ranks over the group, and a sum over it).
#pragma once

#include <cstdint>
#include <vector>

#include <fusor/parallel/mesh.hpp>

#include "support/fusor_test.hpp"

namespace mesh_test {

using namespace fusor;
using flat = view<std::int32_t, dextents<index_t, 1>>;

// Every (data, tensor, pipeline) whose product is n.
inline std::vector<parallel::mesh_shape> shapes_of(int n) {
  std::vector<parallel::mesh_shape> out;
  for (int d = 1; d <= n; ++d)
    for (int t = 1; t <= n; ++t)
      if (n % (d * t) == 0) out.push_back({d, t, n / (d * t)});
  return out;
}

// The world ranks of a group, gathered over it, against what the layout says.
template <class Communicator>
void check_group(Communicator& group, int world_rank, const std::vector<std::int32_t>& want, const char* name) {
  INFO(name, " group");
  REQUIRE(group.size() == static_cast<int>(want.size()));
  CHECK(want[std::size_t(group.rank())] == world_rank);
  std::vector<std::int32_t> got(want.size(), -1);
  got[std::size_t(group.rank())] = world_rank;
  group.all_gather(flat(got.data(), index_t(got.size()))).wait();
  CHECK(got == want);
  std::int32_t sum = world_rank, want_sum = 0;
  for (std::int32_t r : want) want_sum += r;
  group.all_reduce(flat(&sum, 1), comm::reduction_op::sum).wait();
  CHECK(sum == want_sum);
}

template <class Communicator>
void check_mesh(const Communicator& world, const parallel::mesh_shape& shape) {
  INFO("mesh ", parallel::to_string(shape), ", world rank ", world.rank());
  parallel::mesh<Communicator> grid(world, shape);
  const parallel::mesh_coordinates at = grid.at();
  CHECK(at == parallel::coordinates_of(world.rank(), shape));
  CHECK(grid.world_rank_of(at) == world.rank());
  std::vector<std::int32_t> tensor, data, pipeline;
  for (int t = 0; t < shape.tensor; ++t) tensor.push_back(parallel::rank_of({at.data, t, at.pipeline}, shape));
  for (int d = 0; d < shape.data; ++d) data.push_back(parallel::rank_of({d, at.tensor, at.pipeline}, shape));
  for (int p = 0; p < shape.pipeline; ++p) pipeline.push_back(parallel::rank_of({at.data, at.tensor, p}, shape));
  check_group(grid.tensor(), world.rank(), tensor, "tensor");
  check_group(grid.data(), world.rank(), data, "data");
  check_group(grid.pipeline(), world.rank(), pipeline, "pipeline");
  // Tensor groups are consecutive world ranks.
  CHECK(tensor.back() - tensor.front() == shape.tensor - 1);
}

}  // namespace mesh_test
