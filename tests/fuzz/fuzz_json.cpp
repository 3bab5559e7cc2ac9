// libFuzzer target: fusor::io's JSON subset (safetensors headers). Any bytes
// either parse or throw json::syntax_error; a parsed document's strings
// written back with write_string parse to the same text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fusor/io/json.hpp>

#include "fuzz_support.hpp"

namespace json = fusor::io::detail::json;

namespace {
void check_strings(const json::value& v) {
  if (v.type == json::value::kind::string) {
    std::string written;
    json::write_string(written, v.text);
    const json::value again = json::parse("{\"k\": " + written + "}");
    fuzz::require(again.members.size() == 1 && again.members[0].item.text == v.text);
  }
  for (const json::value& e : v.elements) check_strings(e);
  for (const json::member& m : v.members) check_strings(m.item);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_strings(json::parse(text));
  } catch (const json::syntax_error&) {
  }
  return 0;
}
