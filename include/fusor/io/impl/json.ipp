// fusor/io/impl/json.ipp — definitions of fusor/io/json.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/io/json.hpp"

namespace fusor::io::detail::json {
// ---- reading -------------------------------------------------------------------
class parser {
 public:
  explicit parser(std::string_view text) : text_(text) {}

  // The whole text is one value, with only whitespace around it.
  value parse_document() {
    value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the end of the header object");
    return v;
  }

 private:
  // safetensors nests three deep; a hostile header must not exhaust the stack.
  static constexpr int max_depth = 16;

  [[noreturn]] void fail(const std::string& what) const {
    throw syntax_error("at byte " + std::to_string(pos_) + ": " + what);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ == text_.size()) fail("unexpected end of the header");
    return text_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "', found '" + text_[pos_] + "'");
    ++pos_;
  }

  value parse_value(int depth) {
    if (depth > max_depth) fail("nested deeper than " + std::to_string(max_depth) + " levels");
    const char c = peek();
    value v;
    if (c == '{') {
      v.type = value::kind::object;
      ++pos_;
      if (peek() == '}') { ++pos_; return v; }
      for (;;) {
        if (peek() != '"') fail("expected a member name in double quotes");
        member m;
        m.key = parse_string();
        expect(':');
        m.item = parse_value(depth + 1);
        v.members.push_back(std::move(m));
        if (peek() == '}') { ++pos_; return v; }
        expect(',');
      }
    }
    if (c == '[') {
      v.type = value::kind::array;
      ++pos_;
      if (peek() == ']') { ++pos_; return v; }
      for (;;) {
        v.elements.push_back(parse_value(depth + 1));
        if (peek() == ']') { ++pos_; return v; }
        expect(',');
      }
    }
    if (c == '"') {
      v.type = value::kind::string;
      v.text = parse_string();
      return v;
    }
    if (c >= '0' && c <= '9') {
      v.type = value::kind::integer;
      v.number = parse_integer();
      return v;
    }
    fail(std::string("unexpected character '") + c + "' (a safetensors header holds only objects, arrays, "
         "strings and non-negative integers)");
  }

  std::uint64_t parse_integer() {
    const std::size_t start = pos_;
    std::uint64_t n = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (n > (UINT64_MAX - digit) / 10) fail("integer too large");
      n = n * 10 + digit;
      ++pos_;
    }
    if (text_[start] == '0' && pos_ - start > 1) {
      pos_ = start;
      fail("integer with a leading zero");
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail("expected a non-negative integer, found a fraction or exponent");
    return n;
  }

  unsigned parse_hex4() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char h = text_[pos_];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') code |= static_cast<unsigned>(h - 'A' + 10);
      else fail("invalid hexadecimal digit in a \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  // Called at the opening quote.
  std::string parse_string() {
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ == text_.size()) fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') { ++pos_; return out; }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character inside a string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (++pos_ == text_.size()) fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code = parse_hex4();
          if (code >= 0xDC00 && code <= 0xDFFF) fail("unpaired low surrogate in a \\u escape");
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail("unpaired high surrogate in a \\u escape");
            pos_ += 2;
            const unsigned low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("unpaired high surrogate in a \\u escape");
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default: --pos_; fail(std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};
}  // namespace fusor::io::detail::json

namespace fusor::io::detail::json {

FUSOR_DECL void write_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (u < 0x20) (out += "\\u00", out += hex[u >> 4], out += hex[u & 15]);
    else out += c;
  }
  out += '"';
}

FUSOR_DECL value parse(std::string_view text) { return parser(text).parse_document(); }

FUSOR_DECL std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t length;
    std::uint32_t code;
    if (b < 0x80) { ++i; continue; }
    if (b >= 0xC2 && b <= 0xDF) length = 2, code = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) length = 3, code = b & 0x0F;
    else if (b >= 0xF0 && b <= 0xF4) length = 4, code = b & 0x07;
    else return i;
    if (s.size() - i < length) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return i;
      code = (code << 6) | (c & 0x3F);
    }
    const bool overlong = (length == 3 && code < 0x800) || (length == 4 && code < 0x10000);
    if (overlong || (code >= 0xD800 && code <= 0xDFFF) || code > 0x10FFFF) return i;
    i += length;
  }
  return std::string_view::npos;
}

FUSOR_DECL const char* value::kind_name() const {
  switch (type) {
    case kind::string: return "a string";
    case kind::integer: return "an integer";
    case kind::array: return "an array";
    default: return "an object";
  }
}

}  // namespace fusor::io::detail::json
