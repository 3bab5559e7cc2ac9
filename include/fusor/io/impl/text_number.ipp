// fusor/io/impl/text_number.ipp — definitions of fusor/io/text_number.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/io/text_number.hpp"

namespace fusor::io::detail {

FUSOR_DECL std::string number_fault_message(std::string_view text, number_fault fault, const std::string& kind,
                                            const std::string& beyond) {
  std::string quoted(1, '\'');  // appended, not "'" + string: g++ 12 -O3 warns falsely (-Wrestrict) on that
  quoted.append(text).push_back('\'');
  switch (fault) {
    case number_fault::none: return quoted + " is fine";
    case number_fault::not_a_number: return quoted + " is not " + kind;
    case number_fault::beyond_the_type: return quoted + beyond;
    case number_fault::not_finite: return quoted + " is not finite";
  }
  return quoted;
}

}  // namespace fusor::io::detail
