// fusor/optim/impl/flat_state.ipp — definitions of fusor/optim/flat_state.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/optim/flat_state.hpp"

namespace fusor::optim::detail {

FUSOR_DECL void check_size(const char* who, const char* what, index_t expected, index_t got) {
  if (expected != got)
    throw shape_error(std::string("fusor: ") + who + " was made for " + std::to_string(expected) +
                      " parameters, but its " + what + " have shape [" + std::to_string(got) + "] (expected [" +
                      std::to_string(expected) + "])");
}

FUSOR_DECL void check_part(const char* who, index_t first, index_t n, index_t count, index_t gradients) {
  if (first < 0 || first + n > count)
    throw shape_error(std::string("fusor: ") + who + " was made for " + std::to_string(count) +
                      " parameters, but a step of a part asks for elements [" + std::to_string(first) + ", " +
                      std::to_string(first + n) + ")");
  if (gradients != n)
    throw shape_error(std::string("fusor: ") + who + ": a step of " + std::to_string(n) +
                      " parameters with gradients of shape [" + std::to_string(gradients) + "]");
}

}  // namespace fusor::optim::detail
