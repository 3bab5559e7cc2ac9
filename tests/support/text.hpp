// tests/support/text.hpp — text checks shared by tests that do not need the
// rest of support/fusor_test.hpp (which includes most of fusor).
#pragma once

#include <string>

namespace fusor_test {

// Whether `part` occurs in `text` (an error message, a log line).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace fusor_test
