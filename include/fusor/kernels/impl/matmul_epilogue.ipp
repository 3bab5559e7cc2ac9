// fusor/kernels/impl/matmul_epilogue.ipp — definitions of fusor/kernels/matmul_epilogue.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/kernels/matmul_epilogue.hpp"

namespace fusor::detail {

FUSOR_DECL void require_length(const char* what, index_t length, index_t stride, index_t expected, const std::string& c_shape) {
  if (length != expected)
    throw shape_error(std::string("fusor: matmul's ") + what + " has shape [" + std::to_string(length) + "], c has shape " +
                      c_shape + ": it needs " + std::to_string(expected) + " elements");
  if (stride != 1 && length > 1)
    throw error(std::string("fusor: matmul's ") + what + " must be contiguous (stride 1), not stride " + std::to_string(stride));
}

}  // namespace fusor::detail
