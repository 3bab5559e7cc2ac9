// Interoperability with the reference implementation, Hugging Face's
// `safetensors` Python package: it reads what fusor writes (numpy backend for
// F64 F32 F16 I64 I32 I16 I8 U8 BOOL; its raw deserializer, and PyTorch where
// installed, for BF16), and fusor reads what it writes. Values compare exactly.
// Runs tests/io/interop.py with FUSOR_TEST_PYTHON; fails if Python, numpy or
// safetensors is missing (scripts/common.sh installs them).
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <sys/wait.h>

#include "io/io_support.hpp"

using namespace io_test;

namespace {

using matrix = dextents<index_t, 2>;
using image = dextents<index_t, 4>;

struct command_result {
  int status = -1;
  std::string output;
};

// Runs the interop script in `mode` on `file` and `expected`; stdout and stderr together.
command_result run_script(const std::string& mode, const std::filesystem::path& file,
                          const std::filesystem::path& expected) {
  const std::string command = std::string("'") + FUSOR_TEST_PYTHON + "' '" + FUSOR_TEST_INTEROP_SCRIPT + "' " + mode +
                              " '" + file.string() + "' '" + expected.string() + "' 2>&1";
  command_result result;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "cannot run: ", command);
  std::array<char, 4096> buffer;
  while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  INFO("command: ", command);
  INFO("output:\n", result.output);
  CHECK_MESSAGE(result.status == 0, "the safetensors interop script failed (is python3 with numpy and safetensors "
                                    "installed? scripts/common.sh installs them)");
  return result;
}

template <class T>
std::string text_of(const T& x) {
  if constexpr (std::is_same_v<T, bool>) {
    return x ? "1" : "0";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(static_cast<long long>(x));
  } else {
    char buffer[40];
    std::snprintf(buffer, sizeof buffer, "%.17g", to_double(x));
    return buffer;
  }
}

// The expected-values file the script reads, one line per tensor.
struct expectations {
  std::ostringstream text;

  // The tensor's elements in row-major order of its logical indices, read with
  // its own operator() (independent of how fusor::io orders them).
  template <class T, class E, class L>
  void tensor(const std::string& name, const host_tensor<T, E, L>& h) {
    text << "tensor\t" << name << '\t' << fio::dtype_name(fio::dtype_of<T>()) << '\t';
    for (std::size_t r = 0; r != E::rank(); ++r) text << (r ? "," : "") << h.extent(r);
    text << '\t';
    std::array<index_t, E::rank()> idx{};
    for (index_t i = 0; i < h.size(); ++i) {
      text << (i ? " " : "") << text_of(std::apply([&](auto... k) -> T& { return h(k...); }, idx));
      for (std::size_t k = E::rank(); k-- > 0;) {
        if (++idx[k] < h.extent(k)) break;
        idx[k] = 0;
      }
    }
    text << '\n';
  }
  void meta(const std::string& key, const std::string& value) { text << "meta\t" << key << '\t' << value << '\n'; }
  void save(const std::filesystem::path& file) const { std::ofstream(file) << text.str(); }
};

struct expected_tensor {
  std::string dtype;
  std::vector<index_t> shape;
  std::vector<std::string> values;
};

// Reads the script's expected-values file.
std::map<std::string, expected_tensor> read_expected(const std::filesystem::path& file,
                                                     std::map<std::string, std::string>& metadata) {
  std::map<std::string, expected_tensor> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::istringstream split(line);
    for (std::string f; std::getline(split, f, '\t');) fields.push_back(f);
    if (fields.size() == 3 && fields[0] == "meta") metadata[fields[1]] = fields[2];
    if (fields.size() < 4 || fields[0] != "tensor") continue;
    expected_tensor& t = out[fields[1]];
    t.dtype = fields[2];
    std::istringstream shape(fields[3]);
    for (std::string e; std::getline(shape, e, ',');) t.shape.push_back(std::stoll(e));
    std::istringstream values(fields.size() > 4 ? fields[4] : "");
    for (std::string v; values >> v;) t.values.push_back(v);
  }
  return out;
}

// Element i of a record's bytes as the script writes numbers.
std::string record_value(const fio::tensor_record& r, index_t i) {
  auto element = [&]<class T>() {
    T x;
    std::memcpy(&x, r.bytes.data() + i * sizeof(T), sizeof(T));
    return text_of(x);
  };
  switch (r.type) {
    case fio::dtype::f64: return element.template operator()<double>();
    case fio::dtype::f32: return element.template operator()<float>();
    case fio::dtype::f16: return element.template operator()<float16>();
    case fio::dtype::bf16: return element.template operator()<bfloat16>();
    case fio::dtype::i64: return element.template operator()<std::int64_t>();
    case fio::dtype::i32: return element.template operator()<std::int32_t>();
    case fio::dtype::i16: return element.template operator()<std::int16_t>();
    case fio::dtype::i8: return element.template operator()<std::int8_t>();
    case fio::dtype::u8: return element.template operator()<std::uint8_t>();
    default: return std::to_integer<int>(r.bytes[std::size_t(i)]) ? std::string("1") : std::string("0");
  }
}

}  // namespace

TEST_CASE("the reference safetensors package (numpy) reads what fusor wrote: dtypes, shapes, values, metadata") {
  scratch_directory dir("interop_numpy");
  fio::checkpoint_writer writer;
  expectations expected;
  std::uint64_t seed = 500;
  for_each_element_type([&]<class T>() {
    if constexpr (!std::is_same_v<T, bfloat16>) {  // numpy has no bfloat16: see the next test
      const std::string tag = fio::dtype_name(fio::dtype_of<T>());
      host_tensor<T, matrix> m(3, 5);
      host_tensor<T, extents<int, 2, 3, 4>> cube;
      host_tensor<T, extents<index_t>> scalar;
      host_tensor<T, matrix> empty(0, 3);
      fill_elements(m, ++seed);
      fill_elements(cube, ++seed);
      fill_elements(scalar, ++seed);
      writer.add(tag + "_matrix", m), expected.tensor(tag + "_matrix", m);
      writer.add(tag + "_cube", cube), expected.tensor(tag + "_cube", cube);
      writer.add(tag + "_scalar", scalar), expected.tensor(tag + "_scalar", scalar);
      writer.add(tag + "_empty", empty), expected.tensor(tag + "_empty", empty);
    }
  });
  // Non-row-major layouts: numpy must see the logical shape and order.
  host_tensor<float, matrix, col_major> column(4, 3);
  host_tensor<float16, image, nhwc> interleaved(2, 3, 2, 4);
  fill_elements(column, 1);
  fill_elements(interleaved, 2);
  writer.add("column_major", column), expected.tensor("column_major", column);
  writer.add("nhwc_image", interleaved), expected.tensor("nhwc_image", interleaved);
  for (const auto& [key, value] : std::map<std::string, std::string>{
           {"format", "pt"}, {"step", "4200"}, {"quoted", "say \"hi\" \\ back"}, {"unicode", "\xce\xbb \xf0\x9f\x98\x80"}}) {
    writer.add_metadata(key, value);
    expected.meta(key, value);
  }
  writer.save(dir / "fusor.safetensors");
  expected.save(dir / "expected.txt");

  const auto result = run_script("check-numpy", dir / "fusor.safetensors", dir / "expected.txt");
  CHECK(result.output.find("ok: 38 tensors read by safetensors.numpy.load_file") != std::string::npos);
}

TEST_CASE("the reference safetensors package reads fusor's BF16 tensors (raw deserializer; PyTorch if installed)") {
  scratch_directory dir("interop_bf16");
  fio::checkpoint_writer writer;
  expectations expected;
  host_tensor<bfloat16, matrix> weights(6, 5);
  host_tensor<bfloat16, matrix, col_major> column(3, 7);
  host_tensor<bfloat16, extents<index_t>> scalar;
  host_tensor<float, matrix> master(6, 5);  // mixed dtypes in one file, as a mixed-precision checkpoint has
  fill_elements(weights, 3);
  fill_elements(column, 4);
  fill_elements(scalar, 5);
  fill_elements(master, 6);
  writer.add("weights", weights), expected.tensor("weights", weights);
  writer.add("column", column), expected.tensor("column", column);
  writer.add("scalar", scalar), expected.tensor("scalar", scalar);
  writer.add("master", master), expected.tensor("master", master);
  writer.add_metadata("precision", "bf16");
  expected.meta("precision", "bf16");
  writer.save(dir / "bf16.safetensors");
  expected.save(dir / "expected.txt");

  const auto result = run_script("check-raw", dir / "bf16.safetensors", dir / "expected.txt");
  CHECK(result.output.find("ok: 4 tensors read by safetensors.deserialize") != std::string::npos);
  MESSAGE(result.output);
}

TEST_CASE("fusor reads what the reference safetensors package (numpy) wrote") {
  scratch_directory dir("interop_python");
  const auto file = dir / "python.safetensors";
  const auto result = run_script("write", file, dir / "expected.txt");
  REQUIRE(result.status == 0);
  std::map<std::string, std::string> metadata;
  const auto expected = read_expected(dir / "expected.txt", metadata);
  REQUIRE(expected.size() == 11);

  const fio::checkpoint_reader reader(file);
  CHECK(reader.contents().tensors.size() == expected.size());
  CHECK(reader.contents().metadata == metadata);
  CHECK(reader.metadata("framework") == "numpy");
  for (const auto& [name, want] : expected) {
    INFO("tensor ", name);
    REQUIRE(reader.contains(name));
    const fio::tensor_record& r = reader.contents().at(name);
    CHECK(fio::dtype_name(r.type) == want.dtype);
    CHECK(r.shape == want.shape);
    REQUIRE(r.element_count() == index_t(want.values.size()));
    // Integers compare as text (exact at 64 bits), floats as the doubles the text denotes.
    const bool floating = want.dtype.starts_with("F") || want.dtype == "BF16";
    std::size_t mismatches = 0;
    for (index_t i = 0; i < r.element_count(); ++i) {
      const std::string got = record_value(r, i), wanted = want.values[std::size_t(i)];
      mismatches += floating ? std::strtod(got.c_str(), nullptr) != std::strtod(wanted.c_str(), nullptr) : got != wanted;
    }
    CHECK(mismatches == 0);
  }

  // Typed reads, into another layout too.
  host_tensor<float, matrix, col_major> f32(4, 6);
  host_tensor<float16, extents<int, 2, 3, 4>> f16;
  host_tensor<bool, matrix> flags(3, 3);
  reader.read("f32_matrix", f32);
  reader.read("f16_cube", f16);
  reader.read("bool_matrix", flags);
  const auto& f32_values = expected.at("f32_matrix").values;
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 6; ++j) CHECK(double(f32(i, j)) == std::stod(f32_values[std::size_t(i * 6 + j)]));
  CHECK(to_double(f16(1, 2, 3)) == std::stod(expected.at("f16_cube").values[12 + 8 + 3]));
  for (index_t i = 0; i < 9; ++i) CHECK(int(flags.data()[i]) == std::stoi(expected.at("bool_matrix").values[std::size_t(i)]));
}
