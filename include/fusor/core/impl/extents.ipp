// fusor/core/impl/extents.ipp — definitions of fusor/core/extents.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/core/extents.hpp"

namespace fusor::detail {

FUSOR_DECL std::string extents_text(const index_t* extents, std::size_t rank) {
  std::string s = "[";
  for (std::size_t r = 0; r != rank; ++r) {
    if (r) s += ", ";
    s += std::to_string(static_cast<long long>(extents[r]));
  }
  return s + "]";
}

[[noreturn]] FUSOR_DECL void throw_destinations_differ(const std::string& a, const std::string& b) {
  throw shape_error("fusor: destinations of one assignment differ in shape: " + a + " and " + b);
}

[[noreturn]] FUSOR_DECL void throw_does_not_fit(const std::string& expression, const std::string& destination) {
  throw shape_error("fusor: cannot assign an expression of shape " + expression + " to a destination of shape " +
                    destination);
}

[[noreturn]] FUSOR_DECL void throw_no_broadcast(const std::string& a, const std::string& b, std::size_t axis, index_t ea,
                                               index_t eb) {
  throw shape_error("fusor: shapes " + a + " and " + b + " do not broadcast (axis " + std::to_string(axis) + ": " +
                    std::to_string(ea) + " vs " + std::to_string(eb) + ")");
}

}  // namespace fusor::detail
