// fusor/nn/impl/parameters.ipp — definitions of fusor/nn/parameters.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/nn/parameters.hpp"

namespace fusor::nn {

FUSOR_DECL parameter_placement place_parameter(const std::vector<index_t>& shape, const sharding& shard, int shard_index) {
  parameter_placement p;
  if (shard.axis < 0 || shard.ways == 1) {
    p.whole_shape = shape;
    p.segments.push_back({0, std::vector<index_t>(shape.size(), 0), shape});
    return p;
  }
  const auto axis = static_cast<std::size_t>(shard.axis);
  if (axis >= shape.size() || shard_index < 0 || shard_index >= shard.ways || (shard.parts > 1 && axis != 1))
    throw error("fusor::nn: a parameter of shape " + detail::parameter_shape_text(shape) + " sharded along axis " +
                std::to_string(shard.axis) + " in " + std::to_string(shard.parts) + " parts cannot hold slice " +
                std::to_string(shard_index) + " of " + std::to_string(shard.ways));
  p.split = true;
  if (shard.parts == 1) {
    p.whole_shape = shape;
    p.whole_shape[axis] *= shard.ways;
    std::vector<index_t> begin(shape.size(), 0);
    begin[axis] = shard_index * shape[axis];
    p.segments.push_back({0, std::move(begin), shape});
    return p;
  }
  // [parts, rows, rest...] -> whole [parts * rows * ways, rest...]; part k is the box of rows
  // k * rows * ways + shard_index * rows onwards.
  const index_t rows = shape[1];
  std::vector<index_t> box(shape.begin() + 1, shape.end());
  p.whole_shape = box;
  p.whole_shape[0] = shape[0] * rows * shard.ways;
  index_t box_elements = 1;
  for (index_t e : box) box_elements *= e;
  for (index_t k = 0; k < shape[0]; ++k) {
    std::vector<index_t> begin(box.size(), 0);
    begin[0] = (k * shard.ways + shard_index) * rows;
    p.segments.push_back({k * box_elements, std::move(begin), box});
  }
  return p;
}

}  // namespace fusor::nn
