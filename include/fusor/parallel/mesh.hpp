// fusor/parallel/mesh.hpp — data × tensor × pipeline ranks over one world
// communicator, each dimension a communicator of its own (issue 14).
//
//   fs::comm::mpi world;                                             // 8 ranks
//   fs::parallel::mesh grid(world, {.data = 2, .tensor = 2, .pipeline = 2});
//   grid.tensor();    // the 2 ranks that split this rank's layers (Megatron's column/row)
//   grid.data();      // the 2 ranks that hold the same slices and stage, on other batches
//   grid.pipeline();  // the 2 ranks that hold the other stages of this replica
//   grid.at();        // this rank's coordinates {data, tensor, pipeline}
//
// Layout (Megatron-LM's order): the tensor coordinate varies fastest, then data,
// then pipeline — world rank = (pipeline * data_ways + data) * tensor_ways +
// tensor. A tensor group is `tensor` consecutive world ranks, so where the
// launcher fills each node before the next (mpirun's default, srun's block
// distribution) it stays inside a node, on NVLink: tensor parallelism's two
// all-reduces per block are the most frequent and the largest. The mesh checks
// it (host names gathered once): a tensor group whose ranks are on different
// machines is an error naming two of them and how to place ranks (set
// FUSOR_MESH_ALLOW_CROSS_NODE_TENSOR=1 to accept it).
//
// The sub-communicators are made by the world communicator's split(color,
// key) (MPI_Comm_split for comm::mpi; comm::single splits into itself): making
// a mesh is collective, every rank of the world makes the same one.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/view.hpp"

namespace fusor::parallel {

/// How many ways each dimension splits the world.
struct mesh_shape {
  /// \var data
  /// Ways of data parallelism: replicas, each training on its own rows of the batch.
  /// \var tensor
  /// Ways of tensor parallelism: ranks that split each of their layers.
  /// \var pipeline
  /// Ways of pipeline parallelism: stages, each holding a run of layers.
  int data = 1, tensor = 1, pipeline = 1;
  /// The ranks the mesh needs: data x tensor x pipeline.
  int size() const { return data * tensor * pipeline; }
};

/// The shape as text, such as "2 (data) x 2 (tensor) x 2 (pipeline)".
inline std::string to_string(const mesh_shape& s) {
  return std::to_string(s.data) + " (data) x " + std::to_string(s.tensor) + " (tensor) x " +
         std::to_string(s.pipeline) + " (pipeline)";
}

/// A rank's place in the mesh.
struct mesh_coordinates {
  /// \var data
  /// The rank's index in the data dimension, from 0.
  /// \var tensor
  /// The rank's index in the tensor dimension, from 0.
  /// \var pipeline
  /// The rank's index in the pipeline dimension (its stage), from 0.
  int data = 0, tensor = 0, pipeline = 0;
  /// Equal where every coordinate is.
  bool operator==(const mesh_coordinates&) const = default;
};

/// World rank -> coordinates and back: tensor fastest, then data, then pipeline.
constexpr mesh_coordinates coordinates_of(int rank, const mesh_shape& s) {
  return {rank / s.tensor % s.data, rank % s.tensor, rank / (s.tensor * s.data)};
}
/// The world rank at coordinates `c`: coordinates_of's inverse.
constexpr int rank_of(const mesh_coordinates& c, const mesh_shape& s) {
  return (c.pipeline * s.data + c.data) * s.tensor + c.tensor;
}

/// Throws fusor::error unless every dimension of `s` has at least one rank and `s` has `world_size` ranks.
inline void check_mesh_shape(const mesh_shape& s, int world_size) {
  if (s.data < 1 || s.tensor < 1 || s.pipeline < 1)
    throw error("fusor::parallel::mesh: every dimension needs at least 1 rank, not " + to_string(s));
  if (s.size() != world_size)
    throw error("fusor::parallel::mesh: " + to_string(s) + " is " + std::to_string(s.size()) +
                " ranks, but the world communicator has " + std::to_string(world_size));
}

/// The first tensor group that spans machines, as an error message ("" when none):
/// `machine_of_rank[r]` names the machine world rank r runs on.
inline std::string tensor_groups_across_machines(const std::vector<std::int32_t>& machine_of_rank, const mesh_shape& s) {
  for (int first = 0; first < static_cast<int>(machine_of_rank.size()); first += s.tensor)
    for (int r = first + 1; r < first + s.tensor; ++r)
      if (machine_of_rank[std::size_t(r)] != machine_of_rank[std::size_t(first)])
        return "fusor::parallel::mesh: the tensor group of world ranks " + std::to_string(first) + " to " +
               std::to_string(first + s.tensor - 1) + " spans machines (rank " + std::to_string(first) +
               " and rank " + std::to_string(r) +
               " are on different ones): place ranks so that each machine holds whole tensor groups (a multiple "
               "of " + std::to_string(s.tensor) + " ranks per machine, filled in rank order: mpirun's --map-by "
               "core, srun's --distribution=block), or set FUSOR_MESH_ALLOW_CROSS_NODE_TENSOR=1";
  return {};
}

/// This machine, as 31 bits of its host name's hash.
inline std::int32_t machine_id() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return 0;
  return static_cast<std::int32_t>(std::hash<std::string>{}(name) & 0x7fffffff);
}

/// Data x tensor x pipeline ranks over one world communicator, each dimension a communicator of its own
/// (split from the world's); making one is collective.
template <class Communicator>
class mesh {
 public:
  /// Collective over `world`, which must outlive nothing here (the sub-communicators are the mesh's own).
  /// Throws fusor::error where `shape` does not fit the world, or where a tensor group spans machines
  /// (unless FUSOR_MESH_ALLOW_CROSS_NODE_TENSOR=1).
  mesh(const Communicator& world, mesh_shape shape)
      : shape_(checked(shape, world.size())), rank_(world.rank()), at_(coordinates_of(world.rank(), shape)),
        // Each group is the ranks that agree on the other two coordinates, ordered by its own.
        tensor_(world.split(color(at_.data, at_.pipeline, shape.data), at_.tensor)),
        data_(world.split(color(at_.tensor, at_.pipeline, shape.tensor), at_.data)),
        pipeline_(world.split(color(at_.tensor, at_.data, shape.tensor), at_.pipeline)) {
    check_tensor_placement(world);
  }

  /// How many ways each dimension splits the world.
  const mesh_shape& shape() const { return shape_; }
  /// This rank's coordinates {data, tensor, pipeline}.
  const mesh_coordinates& at() const { return at_; }
  /// This rank's rank in the world communicator.
  int world_rank() const { return rank_; }
  /// The world rank at `c` (a neighbour in any dimension: at() with one coordinate changed).
  int world_rank_of(const mesh_coordinates& c) const { return rank_of(c, shape_); }

  /// The tensor group: the ranks that split this rank's layers, ranked by their tensor coordinate.
  const Communicator& tensor() const { return tensor_; }
  /// The data group: the ranks that hold the same slices and stage, on other rows; ranked by data coordinate.
  const Communicator& data() const { return data_; }
  /// The pipeline group: the ranks that hold the other stages of this replica, ranked by stage.
  const Communicator& pipeline() const { return pipeline_; }
  /// \copydoc tensor() const
  Communicator& tensor() { return tensor_; }
  /// \copydoc data() const
  Communicator& data() { return data_; }
  /// \copydoc pipeline() const
  Communicator& pipeline() { return pipeline_; }

 private:
  static mesh_shape checked(const mesh_shape& s, int world_size) {
    check_mesh_shape(s, world_size);
    return s;
  }
  static int color(int a, int b, int a_ways) { return b * a_ways + a; }

  void check_tensor_placement(const Communicator& world) {
    if (shape_.tensor == 1) return;
    const char* allow = std::getenv("FUSOR_MESH_ALLOW_CROSS_NODE_TENSOR");
    if (allow != nullptr && std::string(allow) == "1") return;
    // Every world rank's machine, as a hash of its host name, gathered from everyone.
    std::vector<std::int32_t> machine(static_cast<std::size_t>(world.size()), 0);
    machine[std::size_t(rank_)] = machine_id();
    using flat = view<std::int32_t, dextents<index_t, 1>>;
    world.all_gather(flat(machine.data(), index_t(machine.size()))).wait();
    const std::string problem = tensor_groups_across_machines(machine, shape_);
    if (!problem.empty()) throw error(problem);
  }

  mesh_shape shape_;
  int rank_;
  mesh_coordinates at_;
  Communicator tensor_, data_, pipeline_;
};

}  // namespace fusor::parallel
