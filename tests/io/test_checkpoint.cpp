// checkpoint_writer / checkpoint_reader on tensors in the tested space (host
// memory under the host executor, device memory under CUDA): every dtype,
// several ranks, scalars and empty tensors round-trip bit for bit; col_major,
// nchw and nhwc tensors are stored in logical row-major order and read back
// into any layout; strided host views; dtype, shape and name errors.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/io_support.hpp"

using namespace io_test;

namespace {

using matrix = dextents<index_t, 2>;
using image = dextents<index_t, 4>;

template <class T, class E, class L>
std::vector<std::byte> row_major_bytes_of(const host_tensor<T, E, L>& h) {
  std::vector<std::byte> out(static_cast<std::size_t>(h.size()) * sizeof(T));
  fio::detail::for_each_logical(h.view(), [&](index_t i, index_t offset) {
    std::memcpy(out.data() + i * sizeof(T), h.data() + offset, sizeof(T));
  });
  return out;
}

// A tensor of the tested space holding a copy of `h`, and one of the same
// shape holding other random values (what a read must overwrite).
template <class T, class E, class L>
auto scrambled_like(const host_tensor<T, E, L>& h, std::uint64_t seed) {
  host_tensor<T, E, L> other(h.extents());
  fill_elements(other, seed);
  return to_space(other);
}

std::string checkpoint_name(const char* what) {
  return std::string(what) + "_" FUSOR_TEST_EXECUTOR_NAME ".safetensors";
}

}  // namespace

FUSOR_TEST_CASE("a checkpoint of tensors in the tested space round-trips every dtype, rank, scalar and empty tensor") {
  scratch_directory dir("roundtrip");
  const auto file = dir / checkpoint_name("all_dtypes");
  fio::checkpoint_writer writer;
  std::uint64_t seed = 1000;
  // Written first, read back after the file is saved; held by the lambdas below.
  std::vector<std::function<void(const fio::checkpoint_reader&)>> checks;

  for_each_element_type([&]<class T>() {
    const std::string tag = fio::dtype_name(fio::dtype_of<T>());
    auto matrix_h = std::make_shared<host_tensor<T, matrix>>(5, 7);
    auto cube_h = std::make_shared<host_tensor<T, extents<int, 2, 3, 4>>>();
    auto scalar_h = std::make_shared<host_tensor<T, extents<index_t>>>();
    auto empty_h = std::make_shared<host_tensor<T, matrix>>(0, 4);
    fill_elements(*matrix_h, ++seed);
    fill_elements(*cube_h, ++seed);
    fill_elements(*scalar_h, ++seed);
    writer.add(tag + ".matrix", to_space(*matrix_h));
    writer.add(tag + ".cube", to_space(*cube_h));
    writer.add(tag + ".scalar", to_space(*scalar_h));
    writer.add(tag + ".empty", to_space(*empty_h));
    CHECK(writer.contents().at(tag + ".cube").shape == std::vector<index_t>{2, 3, 4});
    CHECK(writer.contents().at(tag + ".scalar").shape.empty());
    CHECK(writer.contents().at(tag + ".empty").shape == std::vector<index_t>{0, 4});

    checks.push_back([=, s = ++seed](const fio::checkpoint_reader& reader) {
      INFO("dtype ", tag);
      auto matrix_d = scrambled_like(*matrix_h, s);
      auto cube_d = scrambled_like(*cube_h, s + 1);
      auto scalar_d = scrambled_like(*scalar_h, s + 2);
      auto empty_d = to_space(*empty_h);
      reader.read(tag + ".matrix", matrix_d);
      reader.read(tag + ".cube", cube_d.view());
      reader.read(tag + ".scalar", scalar_d);
      reader.read(tag + ".empty", empty_d);
      CHECK(std::memcmp(to_host(matrix_d).data(), matrix_h->data(), 35 * sizeof(T)) == 0);
      CHECK(std::memcmp(to_host(cube_d).data(), cube_h->data(), 24 * sizeof(T)) == 0);
      CHECK(std::memcmp(to_host(scalar_d).data(), scalar_h->data(), sizeof(T)) == 0);
      CHECK(reader.contents().at(tag + ".matrix").bytes == row_major_bytes_of(*matrix_h));
      CHECK(reader.contents().at(tag + ".empty").bytes.empty());
    });
  });
  writer.add_metadata("step", "1200");
  writer.add_metadata("optimizer", "adamw");
  writer.add_metadata("step", "1201");  // a later value replaces an earlier one
  writer.save(file);

  const fio::checkpoint_reader reader(file);
  CHECK(reader.file() == file);
  CHECK(reader.contents().tensors.size() == 40);
  CHECK(reader.metadata("step") == "1201");
  CHECK(reader.metadata("optimizer") == "adamw");
  CHECK(reader.contains("BF16.cube"));
  CHECK_FALSE(reader.contains("BF16.sphere"));
  for (const auto& check : checks) check(reader);
}

FUSOR_TEST_CASE("col_major, nchw and nhwc tensors are stored in logical row-major order and read into any layout") {
  scratch_directory dir("layouts");
  const auto file = dir / checkpoint_name("layouts");
  host_tensor<float, matrix, col_major> column(3, 4);
  host_tensor<bfloat16, image, nchw> planar(2, 3, 4, 5);
  host_tensor<double, image, nhwc> interleaved(2, 3, 4, 5);
  fill_elements(column, 1);
  fill_elements(planar, 2);
  fill_elements(interleaved, 3);

  fio::checkpoint_writer writer;
  writer.add("column", to_space(column));
  writer.add("planar", to_space(planar));
  writer.add("interleaved", to_space(interleaved));
  writer.save(file);
  const fio::checkpoint_reader reader(file);
  CHECK(reader.contents().at("column").shape == std::vector<index_t>{3, 4});
  CHECK(reader.contents().at("interleaved").shape == std::vector<index_t>{2, 3, 4, 5});
  // What PyTorch sees: element (i, j) at row-major position i * 4 + j, whatever the memory order.
  CHECK(reader.contents().at("column").bytes == row_major_bytes_of(column));
  CHECK(reader.contents().at("planar").bytes == row_major_bytes_of(planar));
  CHECK(reader.contents().at("interleaved").bytes == row_major_bytes_of(interleaved));
  const auto first = reader.contents().at("column").bytes;
  float column_10 = 0;
  std::memcpy(&column_10, first.data() + 4 * sizeof(float), sizeof(float));
  CHECK(column_10 == column(1, 0));

  // Back into the other layouts, in the tested space.
  space_tensor<float, matrix, row_major> column_as_rows(3, 4);
  space_tensor<bfloat16, image, nhwc> planar_as_nhwc(2, 3, 4, 5);
  space_tensor<double, image, nchw> interleaved_as_nchw(2, 3, 4, 5);
  reader.read("column", column_as_rows);
  reader.read("planar", planar_as_nhwc);
  reader.read("interleaved", interleaved_as_nchw);
  const auto rows = to_host(column_as_rows);
  const auto nhwc_back = to_host(planar_as_nhwc);
  const auto nchw_back = to_host(interleaved_as_nchw);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) CHECK(rows(i, j) == column(i, j));
  std::size_t mismatches = 0;
  for (index_t n = 0; n < 2; ++n)
    for (index_t c = 0; c < 3; ++c)
      for (index_t h = 0; h < 4; ++h)
        for (index_t w = 0; w < 5; ++w) {
          mismatches += to_double(nhwc_back(n, c, h, w)) != to_double(planar(n, c, h, w));
          mismatches += nchw_back(n, c, h, w) != interleaved(n, c, h, w);
        }
  CHECK(mismatches == 0);
}

FUSOR_TEST_CASE("strided host views (transposes, slices) are written and read in their logical order") {
  scratch_directory dir("strided");
  const auto file = dir / checkpoint_name("strided");
  host_tensor<std::int32_t, matrix> h(4, 6);
  fill_elements(h, 5);
  fio::checkpoint_writer writer;
  writer.add("transposed", transpose(h.view()));
  writer.add("columns_2_to_5", slice<1>(h.view(), 2, 5));
  writer.save(file);
  const fio::checkpoint_reader reader(file);
  CHECK(reader.contents().at("transposed").shape == std::vector<index_t>{6, 4});
  CHECK(reader.contents().at("columns_2_to_5").shape == std::vector<index_t>{4, 3});

  host_tensor<std::int32_t, matrix> t(6, 4), window(4, 6);
  fill_elements(t, 6);
  fill_elements(window, 7);
  host_tensor<std::int32_t, matrix> untouched(4, 6);
  std::memcpy(untouched.data(), window.data(), 24 * sizeof(std::int32_t));
  reader.read("transposed", t);
  reader.read("columns_2_to_5", slice<1>(window.view(), 1, 4));  // into a strided destination
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 6; ++j) {
      CHECK(t(j, i) == h(i, j));
      if (j >= 1 && j < 4) CHECK(window(i, j) == h(i, j + 1));
      else CHECK(window(i, j) == untouched(i, j));  // outside the slice: not written
    }
}

FUSOR_TEST_CASE("read and check refuse another dtype, shape or name, naming the file; check copies nothing") {
  scratch_directory dir("mismatch");
  const auto file = dir / checkpoint_name("mismatch");
  host_tensor<float, matrix> h(2, 3);
  fill_elements(h, 8);
  fio::checkpoint_writer writer;
  writer.add("w", to_space(h));
  writer.add_metadata("epoch", "3");
  writer.save(file);
  const fio::checkpoint_reader reader(file);
  const std::string file_name = file.string();

  space_tensor<bfloat16, matrix> wrong_type(2, 3);
  space_tensor<float, matrix> wrong_shape(3, 2);
  space_tensor<float, dextents<index_t, 3>> wrong_rank(1, 2, 3);
  expect_error<fio::checkpoint_error>([&] { reader.read("w", wrong_type); },
                                      {file_name.c_str(), "tensor 'w'", "stored as F32", "destination holds BF16"});
  expect_error<fio::checkpoint_error>([&] { reader.read("w", wrong_shape); },
                                      {file_name.c_str(), "tensor 'w'", "has shape [2, 3]", "destination has shape [3, 2]"});
  expect_error<fio::checkpoint_error>([&] { reader.read("w", wrong_rank); }, {"[2, 3]", "[1, 2, 3]"});
  expect_error<fio::checkpoint_error>([&] { reader.read("v", wrong_shape); },
                                      {"no tensor named 'v'", "'w'", file_name.c_str()});
  expect_error<fio::checkpoint_error>([&] { (void)reader.metadata("step"); },
                                      {file_name.c_str(), "no metadata 'step'", "'epoch'"});
  expect_error<fio::checkpoint_error>([&] { writer.add("w", h); }, {"already holds a tensor named 'w'"});
  expect_error<fio::checkpoint_error>(
      [&] { writer.add_record({"r", fio::dtype::i64, {3}, random_bytes<std::int32_t>(3, 9)}); },
      {"'r'", "I64", "holds 12 bytes, not 24"});
  expect_error<fio::checkpoint_error>([&] { fio::checkpoint_reader(dir / "absent.safetensors"); },
                                      {"absent.safetensors", "No such file or directory"});

  // check: the same refusals, nothing copied, and the record read would copy (to check a set of tensors before
  // any destination changes).
  host_tensor<float, matrix> other(2, 3);
  fill_elements(other, 13);
  const auto destination = to_space(other);
  const fio::tensor_record& record = reader.check("w", destination);
  CHECK(record.name == "w");
  REQUIRE(record.element_count() == 6);
  for (index_t i = 0; i < 6; ++i) CHECK(record.value(i) == double(h.data()[i]));
  CHECK(as_doubles(destination) == as_doubles(other));  // checked, not copied
  expect_error<fio::checkpoint_error>([&] { (void)reader.check("w", wrong_shape); },
                                      {"tensor 'w'", "has shape [2, 3]", "destination has shape [3, 2]"});
  expect_error<fio::checkpoint_error>([&] { (void)reader.check("v", destination); }, {"no tensor named 'v'"});
  reader.read("w", destination);
  CHECK(as_doubles(destination) == as_doubles(h));
}

#if defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("a device view with gaps is refused: device memory is copied as one block") {
  space_tensor<float, matrix> d(4, 6);
  fio::checkpoint_writer writer;
  expect_error<fio::checkpoint_error>([&] { writer.add("columns", slice<1>(d.view(), 1, 3)); },
                                      {"'columns'", "device view with gaps"});
}
#endif
