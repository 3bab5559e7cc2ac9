// fusor/io/json.hpp — the piece of JSON a safetensors header is written in:
// objects, arrays, strings (with every escape) and non-negative integers.
//
// Small on purpose: a header needs nothing more, and fusor takes no JSON
// dependency for it. Objects keep their members in document order, duplicates
// included, so the safetensors decoder can name a duplicated tensor. Anything
// outside the subset (true, null, fractions, negative numbers) is a syntax
// error naming the byte where it starts. Internal to fusor::io.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"

namespace fusor::io::detail::json {

struct syntax_error : error {
  using error::error;
};

struct member;

struct value {
  enum class kind { string, integer, array, object };
  kind type = kind::object;
  std::string text;             // kind::string
  std::uint64_t number = 0;     // kind::integer
  std::vector<value> elements;  // kind::array
  std::vector<member> members;  // kind::object, in document order

  const char* kind_name() const;
};

struct member {
  std::string key;
  value item;
};

// ---- writing -------------------------------------------------------------------
// A JSON string literal: quotes, backslashes and control characters escaped;
// other UTF-8 passes through unchanged.
FUSOR_DECL void write_string(std::string& out, std::string_view s);


FUSOR_DECL value parse(std::string_view text);

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF); returns the offset of the first bad byte, or npos.
FUSOR_DECL std::size_t invalid_utf8_at(std::string_view s);

}  // namespace fusor::io::detail::json

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/io/impl/json.ipp"
#endif
