// fusor/core/impl/error.ipp — definitions of fusor/core/error.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/core/error.hpp"

namespace fusor {

FUSOR_DECL allocation_error::allocation_error(std::size_t bytes, const char* space, const std::string& why)
    : error("fusor: cannot allocate " + std::to_string(bytes) + " bytes of " + space + " memory: " + why),
      bytes_requested(bytes) {}

}  // namespace fusor
