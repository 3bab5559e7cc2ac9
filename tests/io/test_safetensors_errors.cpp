// Every way decode_safetensors refuses a file, each error naming the source
// and the problem: truncated length, length past the end, bad UTF-8 or JSON,
// wrong header structure, unknown dtype, offsets out of range, overlapping,
// with gaps or with the wrong byte count, duplicate names.
#include <cstring>
#include <string>
#include <vector>

#include "io/io_support.hpp"

using namespace io_test;

namespace {

// 8-byte length, the header text as given, then `data_bytes` random bytes.
std::vector<std::byte> file_with(const std::string& header, std::size_t data_bytes) {
  std::vector<std::byte> bytes(8);
  const std::uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  const auto h = bytes_of(header);
  bytes.insert(bytes.end(), h.begin(), h.end());
  const auto data = random_bytes<std::uint8_t>(static_cast<index_t>(data_bytes), 11);
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, std::uint64_t begin,
                  std::uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

void expect_refused(const std::vector<std::byte>& bytes, std::initializer_list<const char*> parts) {
  expect_error<fio::checkpoint_error>([&] { (void)fio::decode_safetensors(bytes, "model.safetensors"); }, parts);
  expect_error<fusor::error>([&] { (void)fio::decode_safetensors(bytes, "model.safetensors"); },
                             {"safetensors file 'model.safetensors'"});
}

}  // namespace

TEST_CASE("a file too short for the header length is refused") {
  auto bytes = file_with("{}", 0);
  bytes.resize(5);
  expect_refused(bytes, {"5 bytes long", "too short for the 8-byte header length"});
  expect_refused({}, {"0 bytes long"});
}

TEST_CASE("a header length past the end of the file, or beyond 100 MB, is refused") {
  auto bytes = file_with("{}      ", 0);
  const std::uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  expect_refused(bytes, {"header length 1000 reaches past the end of the file (16 bytes)"});
  const std::uint64_t huge = ~std::uint64_t(0) - 3;  // 8 + huge would wrap around
  std::memcpy(bytes.data(), &huge, 8);
  expect_refused(bytes, {"exceeds the 100 MB limit"});
}

TEST_CASE("a header that is not valid UTF-8 or not valid JSON is refused, naming the byte") {
  expect_refused(file_with("{\"a\xff\":1}", 0), {"not valid UTF-8 (byte 3)"});
  expect_refused(file_with("{\"\xc0\xaf\":1}", 0), {"not valid UTF-8"});  // overlong '/'
  expect_refused(file_with("{\"a\":", 0), {"not valid JSON", "unexpected end"});
  expect_refused(file_with("{\"a\":{\"dtype\":\"F32\"", 0), {"not valid JSON", "unexpected end"});
  expect_refused(file_with("{\"a\":true}", 0), {"not valid JSON", "at byte 5", "unexpected character 't'"});
  expect_refused(file_with("{\"a\":[-1]}", 0), {"not valid JSON", "unexpected character '-'"});
  expect_refused(file_with("{\"a\":[1.5]}", 0), {"not valid JSON", "fraction"});
  expect_refused(file_with("{\"a\":[01]}", 0), {"not valid JSON", "leading zero"});
  expect_refused(file_with("{\"a\":[99999999999999999999]}", 0), {"integer too large"});
  expect_refused(file_with("{\"a\" 1}", 0), {"expected ':'"});
  expect_refused(file_with("{\"a\":1 \"b\":2}", 0), {"expected ','"});
  expect_refused(file_with("{a:1}", 0), {"member name in double quotes"});
  expect_refused(file_with("{\"a\\q\":1}", 0), {"invalid escape '\\q'"});
  expect_refused(file_with("{\"\\ud800\":1}", 0), {"unpaired high surrogate"});
  expect_refused(file_with("{\"\\u12g4\":1}", 0), {"invalid hexadecimal digit"});
  expect_refused(file_with("{\"a\nb\":1}", 0), {"control character inside a string"});
  expect_refused(file_with("{\"a", 0), {"unterminated string"});
  expect_refused(file_with("{} {}", 0), {"unexpected text after the end"});
  expect_refused(file_with(std::string(40, '[') + std::string(40, ']'), 0), {"nested deeper than"});
  expect_refused(file_with("[1, 2]", 0), {"the header is an array, not an object"});
}

TEST_CASE("a header whose structure is not safetensors' is refused") {
  expect_refused(file_with("{\"w\":[1]}", 0), {"tensor 'w' is described by an array, not an object"});
  expect_refused(file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4),
                 {"tensor 'w' lacks \"dtype\", \"shape\" or \"data_offsets\""});
  expect_refused(file_with("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4), {"\"dtype\" is not a string"});
  expect_refused(file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":7,\"data_offsets\":[0,4]}}", 4), {"\"shape\" is not an array"});
  expect_refused(file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4),
                 {"\"shape\" holds a string"});
  expect_refused(file_with("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4),
                 {"\"data_offsets\" holds 3 numbers, not 2"});
  expect_refused(file_with("{\"__metadata__\":[]}", 0), {"\"__metadata__\" is not an object"});
  expect_refused(file_with("{\"__metadata__\":{\"epoch\":3}}", 0),
                 {"metadata 'epoch' is an integer", "strings to strings"});
  expect_refused(file_with("{\"__metadata__\":{},\"__metadata__\":{}}", 0), {"\"__metadata__\" appears twice"});
  expect_refused(file_with("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0), {"metadata 'k' appears twice"});
}

TEST_CASE("an unknown dtype is refused by name") {
  expect_refused(file_with(std::string("{") + entry("w", "F8_E4M3", "[4]", 0, 4) + "}", 4),
                 {"tensor 'w'", "unknown dtype 'F8_E4M3'", "F64, F32, F16, BF16"});
}

TEST_CASE("offsets out of range, overlapping, with gaps or of the wrong length are refused") {
  const std::string a = entry("a", "F32", "[2]", 0, 8);
  // Out of range: the data holds 8 bytes.
  expect_refused(file_with(std::string("{") + entry("a", "F32", "[25]", 0, 100) + "}", 8),
                 {"tensor 'a'", "[0, 100]", "out of range", "the data holds 8 bytes"});
  expect_refused(file_with(std::string("{") + entry("a", "F32", "[0]", 8, 4) + "}", 8), {"[8, 4]", "end before they begin"});
  // Overlap: b starts inside a.
  expect_refused(file_with(std::string("{") + a + "," + entry("b", "F32", "[2]", 4, 12) + "}", 12),
                 {"tensor 'b'", "[4, 12]", "overlaps tensor 'a'"});
  // Gaps: before the first tensor, between two, after the last.
  expect_refused(file_with(std::string("{") + entry("a", "F32", "[2]", 4, 12) + "}", 12),
                 {"a gap of 4 bytes lies before tensor 'a'"});
  expect_refused(file_with(std::string("{") + a + "," + entry("b", "F32", "[2]", 12, 20) + "}", 20),
                 {"a gap of 4 bytes lies before tensor 'b'", "after tensor 'a'"});
  expect_refused(file_with(std::string("{") + a + "}", 12), {"4 bytes after the last tensor belong to none"});
  // Wrong byte count for dtype and shape.
  expect_refused(file_with(std::string("{") + entry("a", "F32", "[3]", 0, 8) + "}", 8),
                 {"tensor 'a'", "F32", "[3]", "needs 12 bytes", "[0, 8] hold 8"});
  expect_refused(file_with(std::string("{") + entry("a", "F64", "[4294967296,4294967296]", 0, 8) + "}", 8),
                 {"byte count overflows"});
}

TEST_CASE("a name used twice is refused") {
  expect_refused(file_with(std::string("{") + entry("a", "U8", "[2]", 0, 2) + "," + entry("a", "U8", "[2]", 2, 4) + "}", 4),
                 {"duplicate tensor name 'a'"});
}
