// fusor/nn/impl/linear.ipp — definitions of fusor/nn/linear.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/nn/linear.hpp"

namespace fusor::nn::detail {

FUSOR_DECL std::vector<parameter_spec> linear_parameters(std::size_t in, std::size_t out, std::size_t local_in,
                                                         std::size_t local_out, bool column, bool row, int ways,
                                                         int parts) {
  parameter_spec weight{"weight", {index_t(local_out), index_t(local_in)}, initializer::uniform_fan_in(index_t(in))};
  parameter_spec bias{"bias", {index_t(local_out)}, initializer::uniform_fan_in(index_t(in))};
  if (column) {
    shard_output_rows(weight, {index_t(out), index_t(in)}, ways, parts);
    shard_output_rows(bias, {index_t(out)}, ways, parts);
  }
  if (row) weight.shard = {1, ways};
  return {weight, bias};
}

}  // namespace fusor::nn::detail
