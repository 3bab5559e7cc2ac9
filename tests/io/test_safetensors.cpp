// The safetensors format in memory: dtype names and sizes, encode/decode round
// trips of every dtype (random data, several tensors, metadata, multi-dim, 0-d
// and empty tensors), the exact byte layout of the header, lookups by name.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "io/io_support.hpp"

using namespace io_test;

TEST_CASE("dtype_of, dtype_size, dtype_name and dtype_from_name agree for every element type") {
  for_each_element_type([]<class T>() {
    constexpr fio::dtype t = fio::dtype_of<T>();
    CHECK(fio::dtype_size(t) == sizeof(T));
    const auto round_trip = fio::dtype_from_name(fio::dtype_name(t));
    REQUIRE(round_trip.has_value());
    CHECK(*round_trip == t);
  });
  CHECK(std::string(fio::dtype_name(fio::dtype_of<double>())) == "F64");
  CHECK(std::string(fio::dtype_name(fio::dtype_of<float>())) == "F32");
  CHECK(std::string(fio::dtype_name(fio::dtype_of<fusor::bfloat16>())) == "BF16");
  CHECK(std::string(fio::dtype_name(fio::dtype_of<fusor::float16>())) == "F16");
  CHECK(std::string(fio::dtype_name(fio::dtype_of<std::int64_t>())) == "I64");
  CHECK(std::string(fio::dtype_name(fio::dtype_of<std::uint8_t>())) == "U8");
  CHECK(std::string(fio::dtype_name(fio::dtype_of<bool>())) == "BOOL");
  // Precision policies name their storage type.
  CHECK(fio::dtype_of<fusor::bf16>() == fio::dtype::bf16);
  CHECK(fio::dtype_of<fusor::fp16>() == fio::dtype::f16);
  CHECK(fio::dtype_of<fusor::tf32>() == fio::dtype::f32);
  CHECK(fio::dtype_of<fusor::fp64>() == fio::dtype::f64);
  CHECK_FALSE(fio::dtype_from_name("F8_E4M3").has_value());
  CHECK_FALSE(fio::dtype_from_name("f32").has_value());
}

TEST_CASE("encode then decode gives back every tensor of every dtype, bit for bit, in order, with metadata") {
  fio::safetensors_file file;
  std::uint64_t seed = 100;
  for_each_element_type([&]<class T>() {
    const std::string tag = fio::dtype_name(fio::dtype_of<T>());
    // Several ranks per dtype, including a scalar and an empty tensor.
    const std::vector<std::vector<index_t>> shapes = {{7}, {3, 5}, {2, 3, 4}, {}, {4, 0, 3}, {2, 1, 3, 2}};
    for (std::size_t s = 0; s != shapes.size(); ++s) {
      fio::tensor_record r{tag + ".t" + std::to_string(s), fio::dtype_of<T>(), shapes[s], {}};
      r.bytes = random_bytes<T>(r.element_count(), ++seed);
      file.tensors.push_back(std::move(r));
    }
  });
  file.metadata = {{"format", "pt"}, {"step", "1234"}, {"quote \" and \\ backslash", "tab\tnewline\n"},
                   {"unicode", "\xce\xbb \xe2\x88\x80 \xf0\x9f\x98\x80"}, {"control", std::string("\x01\x1f", 2)}};

  const std::vector<std::byte> bytes = fio::encode_safetensors(file);
  const fio::safetensors_file back = fio::decode_safetensors(bytes, "memory");
  REQUIRE(back.tensors.size() == file.tensors.size());
  for (std::size_t i = 0; i != file.tensors.size(); ++i) {
    INFO("tensor ", file.tensors[i].name);
    CHECK(back.tensors[i].name == file.tensors[i].name);
    CHECK(back.tensors[i].type == file.tensors[i].type);
    CHECK(back.tensors[i].shape == file.tensors[i].shape);
    CHECK(back.tensors[i].bytes == file.tensors[i].bytes);
  }
  CHECK(back.metadata == file.metadata);
  CHECK(back.at("F32.t1").shape == std::vector<index_t>{3, 5});
  CHECK(back.at("BOOL.t3").element_count() == 1);
  CHECK(back.at("I8.t4").bytes.empty());
}

TEST_CASE("tensor_record::value reads an element of every dtype as a double, exactly") {
  for_each_element_type([&]<class T>() {
    INFO(fio::dtype_name(fio::dtype_of<T>()));
    std::mt19937_64 rng(7);
    T values[200];  // not std::vector: vector<bool> has no data()
    for (T& v : values) v = random_element<T>(rng);
    if constexpr (!std::is_integral_v<T>) {  // the edges: NaN, both infinities, a subnormal of the type, -0
      values[0] = convert<T>(std::numeric_limits<double>::quiet_NaN());
      values[1] = convert<T>(HUGE_VAL);
      values[2] = convert<T>(-HUGE_VAL);
      values[3] = convert<T>(std::ldexp(3.0, std::is_same_v<T, float16> ? -24 : -130));
      values[4] = convert<T>(-0.0);
    }
    fio::tensor_record r{"t", fio::dtype_of<T>(), {index_t(std::size(values))}, {}};
    r.bytes.resize(sizeof values);
    std::memcpy(r.bytes.data(), values, sizeof values);
    int wrong = 0;
    for (std::size_t i = 0; i != std::size(values); ++i) {
      const double got = r.value(index_t(i));
      if constexpr (std::is_integral_v<T>) {
        wrong += got != double(values[i]);
      } else {
        const double want = std::is_same_v<T, double> ? double(values[i]) : double(convert<float>(values[i]));
        wrong += std::isnan(want) ? !std::isnan(got) : got != want || std::signbit(got) != std::signbit(want);
      }
    }
    CHECK(wrong == 0);
  });
}

TEST_CASE("the bytes follow the format: 8-byte little-endian length, space-padded JSON, data in insertion order") {
  fio::safetensors_file file;
  fio::tensor_record b{"b", fio::dtype::f16, {3}, random_bytes<float16>(3, 1)};
  fio::tensor_record a{"a", fio::dtype::i32, {2, 2}, random_bytes<std::int32_t>(4, 2)};
  file.tensors = {b, a};
  file.metadata["step"] = "7";
  const std::vector<std::byte> bytes = fio::encode_safetensors(file);

  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(bytes[std::size_t(i)]);
  const std::string header(reinterpret_cast<const char*>(bytes.data() + 8), n);
  const std::string json =
      R"({"__metadata__":{"step":"7"},"b":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
      R"("a":{"dtype":"I32","shape":[2,2],"data_offsets":[6,22]}})";
  CHECK(n % 8 == 0);
  CHECK(header.substr(0, json.size()) == json);
  CHECK(header.find_first_not_of(' ', json.size()) == std::string::npos);
  REQUIRE(bytes.size() == 8 + n + 6 + 16);
  CHECK(std::memcmp(bytes.data() + 8 + n, b.bytes.data(), 6) == 0);
  CHECK(std::memcmp(bytes.data() + 8 + n + 6, a.bytes.data(), 16) == 0);
}

TEST_CASE("decoding accepts what other writers may produce: any member order, whitespace, escapes, no padding") {
  // Tensors listed out of offset order, metadata last, \u escapes, a surrogate pair.
  const std::string header =
      " {\n \"second\" : { \"shape\" : [ 1 ] , \"data_offsets\" : [ 4 , 5 ] , \"dtype\" : \"U8\" } ,"
      "\"fir\\u0073t\\ud83d\\ude00\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4],\"extra\":\"ignored\"},"
      "\"__metadata__\":{\"k\\n\":\"v\\/\\\"\"}}";
  std::vector<std::byte> bytes(8);
  const std::uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  const auto h = bytes_of(header);
  bytes.insert(bytes.end(), h.begin(), h.end());
  const auto data = random_bytes<std::uint8_t>(5, 3);
  bytes.insert(bytes.end(), data.begin(), data.end());

  const fio::safetensors_file file = fio::decode_safetensors(bytes, "hand-written");
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.tensors[0].name == "first\xf0\x9f\x98\x80");  // file order: by offset
  CHECK(file.tensors[0].type == fio::dtype::i16);
  CHECK(file.tensors[0].bytes == std::vector<std::byte>(data.begin(), data.begin() + 4));
  CHECK(file.tensors[1].name == "second");
  CHECK(file.tensors[1].bytes == std::vector<std::byte>(data.begin() + 4, data.end()));
  CHECK(file.metadata.at("k\n") == "v/\"");
}

TEST_CASE("an empty file (no tensors, no metadata) round-trips") {
  const auto bytes = fio::encode_safetensors({});
  CHECK(bytes.size() == 16);  // "{}" padded to 8
  const auto file = fio::decode_safetensors(bytes, "empty");
  CHECK(file.tensors.empty());
  CHECK(file.metadata.empty());
}

TEST_CASE("find and at look tensors up by name; at names the missing one and those present") {
  fio::safetensors_file file;
  file.tensors.push_back({"weight", fio::dtype::f32, {2}, random_bytes<float>(2, 4)});
  file.tensors.push_back({"bias", fio::dtype::f32, {1}, random_bytes<float>(1, 5)});
  REQUIRE(file.find("bias") != nullptr);
  CHECK(file.find("bias")->bytes == file.tensors[1].bytes);
  CHECK(file.find("gamma") == nullptr);
  CHECK(&file.at("weight") == &file.tensors[0]);
  expect_error<fio::checkpoint_error>([&] { (void)file.at("gamma"); }, {"'gamma'", "'weight'", "'bias'"});
}

TEST_CASE("encode refuses records it cannot write faithfully") {
  fio::safetensors_file file;
  file.tensors.push_back({"w", fio::dtype::f32, {2, 3}, random_bytes<float>(5, 6)});
  expect_error<fio::checkpoint_error>([&] { (void)fio::encode_safetensors(file); },
                                      {"'w'", "F32", "[2, 3]", "holds 20 bytes, not 24"});
  file.tensors[0].bytes = random_bytes<float>(6, 6);
  file.tensors.push_back(file.tensors[0]);
  expect_error<fio::checkpoint_error>([&] { (void)fio::encode_safetensors(file); }, {"two tensors", "'w'"});
  file.tensors[1].name = "__metadata__";
  expect_error<fio::checkpoint_error>([&] { (void)fio::encode_safetensors(file); }, {"'__metadata__'", "reserves"});
}
