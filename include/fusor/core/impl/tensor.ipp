// fusor/core/impl/tensor.ipp — definitions of fusor/core/tensor.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/core/tensor.hpp"

namespace fusor::detail {

[[noreturn]] FUSOR_DECL void throw_tensor_too_large(const std::string& shape, std::uintmax_t max_count) {
  throw shape_error("fusor: a tensor of shape " + shape + " has more elements than its index type counts (" +
                    std::to_string(max_count) +
                    " at most) or more bytes than memory can address; larger tensors need extents of fusor::index_t");
}

}  // namespace fusor::detail
