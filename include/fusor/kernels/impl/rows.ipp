// fusor/kernels/impl/rows.ipp — definitions of fusor/kernels/rows.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/kernels/rows.hpp"

namespace fusor::detail {

[[noreturn]] FUSOR_DECL void throw_shapes_differ(const char* op, const char* a_name, const std::string& a_shape,
                                                const char* b_name, const std::string& b_shape) {
  throw shape_error(std::string("fusor: ") + op + ": " + a_name + " has shape " + a_shape + " but " + b_name +
                    " has shape " + b_shape + "; they must be equal");
}

[[noreturn]] FUSOR_DECL void throw_not_per_row(const char* op, const char* name, const std::string& shape,
                                              const std::string& rows_shape, index_t rows) {
  throw shape_error(std::string("fusor: ") + op + ": " + name + " has shape " + shape + " but the rows have shape " +
                    rows_shape + "; it needs one value per row, [" + std::to_string(static_cast<long long>(rows)) +
                    "] or the leading shape");
}

}  // namespace fusor::detail
