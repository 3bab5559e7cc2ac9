// Tensors, views, layouts and copies: construction, indexing, strided views,
// copies between spaces and layouts, and the errors that name the problem.
#include <cstring>

#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {
using matrix_extents = extents<int, dynamic, dynamic>;
}

FUSOR_TEST_CASE("a tensor round-trips through the tested space, synchronously and asynchronously") {
  host_tensor<float, extents<int, dynamic, 7>> h(5);
  fill_random(h, 1);
  auto t = to_space(h);
  auto back = to_host(t);
  CHECK(std::memcmp(back.data(), h.data(), sizeof(float) * 35) == 0);

  host_tensor<bfloat16, extents<int, dynamic, 7>> hb(5), hb_back(5);
  fill_random(hb, 2);
  poison(hb_back);
  space_tensor<bfloat16, extents<int, dynamic, 7>> tb(5);
  executor ex{};
  stream_t stream{};
#if defined(FUSOR_TEST_CUDA)
  stream = ex.stream;
#endif
  copy_async(tb, hb, stream);
  copy_async(hb_back, tb, stream);
  finish(ex);
  CHECK(std::memcmp(hb_back.data(), hb.data(), sizeof(bfloat16) * 35) == 0);
}

#if defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("pinned host memory: asynchronous copies and kernels that read it") {
  tensor<float, extents<int, dynamic>, row_major, pinned_space> pinned(1000);
  fill_random(pinned, 3);
  space_tensor<float, extents<int, dynamic>> d(1000);
  executor ex{};
  copy_async(d, pinned, ex.stream);
  assign(d, d * 2 + pinned, ex);
  finish(ex);
  const auto h = to_host(d);
  for (int i = 0; i < 1000; ++i) CHECK(close(h(i), 3.0 * pinned(i), 1e-6));
}

FUSOR_TEST_CASE("a failed CUDA call names the call, the file and the line") {
  expect_error<fusor::cuda_error>([] { FUSOR_CUDA_CHECK(cudaSetDevice(1 << 20)); },
                                  {"cudaSetDevice(1 << 20)", "test_tensor.cpp:"});
  // More than the device has: refused before it reaches the pool, naming the device's size.
  expect_error<fusor::allocation_error>([] { space_tensor<float, extents<index_t, dynamic>> t(index_t(1) << 50); },
                                        {"4503599627370496 bytes of device memory", "the device has"});
}
#else
FUSOR_TEST_CASE("without a GPU, CUDA-only work says so instead of crashing") {
  CHECK_FALSE(fusor::gpu::available());
  CHECK_THROWS_WITH_AS(fusor::gpu::require("the cuda executor"), doctest::Contains("needs a CUDA GPU"),
                       fusor::cuda_error);
}
#endif

FUSOR_TEST_CASE("allocation failures name the bytes and the space") {
  const std::size_t huge = std::size_t(1) << 62;
  try {
    (void)allocate<host_space>(huge);
    FAIL("a 2^62-byte allocation succeeded");
  } catch (const allocation_error& e) {
    CHECK(e.bytes_requested == huge);
    CHECK(std::string(e.what()).find(std::to_string(huge) + " bytes of host memory") != std::string::npos);
  }
}

FUSOR_TEST_CASE("sizes that do not fit the extents' index type are refused, not wrapped around") {
  // 2^40 as an int would be 0: an empty tensor where a huge one was asked for.
  expect_error<fusor::shape_error>([] { space_tensor<float, extents<int, dynamic>> t(index_t(1) << 40); },
                            {"1099511627776", "index type", "at most 2147483647", "fusor::index_t"});
  expect_error<fusor::shape_error>([] { space_tensor<float, extents<int, dynamic>> t(-3); }, {"size of -3", "0 or more"});
  expect_error<fusor::shape_error>([] { space_tensor<float, extents<index_t, dynamic>> t(-1); }, {"size of -1", "0 or more"});
  // Each size fits, the count (2^32) does not: the mapping would wrap it to 0.
  expect_error<fusor::shape_error>([] { space_tensor<float, extents<int, dynamic, dynamic>> t(65536, 65536); },
                            {"[65536, 65536]", "more elements than its index type counts", "2147483647 at most"});
  // In index_t the same shape is fine as a shape; only its bytes are refused.
  expect_error<fusor::shape_error>([] { host_tensor<double, extents<index_t, dynamic, dynamic>> t(index_t(1) << 31, index_t(1) << 31); },
                            {"[2147483648, 2147483648]", "more bytes than memory can address"});
  const space_tensor<float, extents<int, dynamic, dynamic>> fits(1024, 1024);
  CHECK(fits.size() == 1024 * 1024);
}

FUSOR_TEST_CASE("static and dynamic extents mix freely") {
  host_tensor<float, extents<int, dynamic, 784>> batch(32);
  static_assert(decltype(batch)::extents_type::static_extent(1) == 784);
  CHECK(batch.extent(0) == 32);
  CHECK(batch.extent(1) == 784);
  CHECK(batch.size() == 32 * 784);
  CHECK(shape_string(batch.extents()) == "[32, 784]");
  host_tensor<float16, extents<int, 2, 3>> fixed;  // all static: allocates at once
  CHECK(fixed.data() != nullptr);
  CHECK(fixed.size() == 6);
  static_assert(std::is_trivially_copyable_v<std::remove_cvref_t<decltype(batch.view())>>);
  static_assert(std::is_same_v<decltype(batch)::value_type, float>);
  static_assert(std::is_same_v<host_tensor<fusor::bf16, extents<int, 2>>::element_type, bfloat16>);
  static_assert(std::is_same_v<host_tensor<fusor::bf16, extents<int, 2>>::value_type, float>);
  static_assert(std::is_same_v<compute_t<mixed<float16, double>>, double>);
  static_assert(precision_traits<fusor::tf32>::tensor_float_32);
}

TEST_CASE("layouts map logical indices to the documented offsets") {
  host_tensor<float, extents<int, 2, 3, 4, 5>, nhwc> image;
  host_tensor<float, extents<int, 2, 3, 4, 5>, nchw> planar;
  host_tensor<float, matrix_extents, col_major> m(3, 4);
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w) {
          CHECK(&image(n, c, h, w) - image.data() == ((n * 4 + h) * 5 + w) * 3 + c);
          CHECK(&planar(n, c, h, w) - planar.data() == ((n * 3 + c) * 4 + h) * 5 + w);
        }
  CHECK(&m(2, 3) - m.data() == 3 * 3 + 2);
}

TEST_CASE("strided views: transpose, permute and slice see the same memory") {
  host_tensor<float, extents<int, 3, 4, 5>> t;
  fill_random(t, 4);
  auto p = permute<2, 0, 1>(t.view());
  static_assert(decltype(p)::extents_type::static_extent(0) == 5);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(&p(i, j, k) == &t(j, k, i));
  host_tensor<float, matrix_extents> m(4, 6);
  auto tr = transpose(m.view());
  CHECK(tr.extent(0) == 6);
  CHECK(&tr(5, 3) == &m(3, 5));
  auto s = slice<1>(m.view(), 2, 5);
  CHECK(s.extent(0) == 4);
  CHECK(s.extent(1) == 3);
  CHECK(&s(1, 0) == &m(1, 2));
  expect_error<fusor::shape_error>([&] { (void)slice<1>(m.view(), 2, 7); }, {"[2, 7)", "[4, 6]"});
}

TEST_CASE("with_dynamic_extents: the same memory, every extent dynamic, the layout and strides kept") {
  host_tensor<float, extents<int, 3, 4, 5>> t;
  fill_random(t, 5);
  const auto d = with_dynamic_extents(t.view());
  using D = std::remove_cvref_t<decltype(d)>;
  static_assert(std::is_same_v<D::extents_type, dextents<int, 3>>);
  static_assert(std::is_same_v<D::layout_type, row_major>);
  static_assert(std::is_same_v<D::precision, float>);
  CHECK(d.data() == t.data());
  CHECK(d.extent(0) == 3);
  CHECK(d.extent(1) == 4);
  CHECK(d.extent(2) == 5);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) CHECK(&d(i, j, k) == &t(i, j, k));
  // A strided view (a permutation) keeps its strides.
  const auto p = with_dynamic_extents(permute<2, 0, 1>(t.view()));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(p)>::extents_type, dextents<int, 3>>);
  CHECK(p.extent(0) == 5);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(&p(i, j, k) == &t(j, k, i));
}

TEST_CASE("host copies between layouts reorder; copies check shapes") {
  host_tensor<float, matrix_extents> row(5, 7);
  host_tensor<float, matrix_extents, col_major> col(5, 7);
  fill_random(row, 6);
  poison(col);
  copy(col, row);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) CHECK(col(i, j) == row(i, j));
  host_tensor<float, matrix_extents> other(7, 5);
  expect_error<fusor::shape_error>([&] { copy(other, row); }, {"[5, 7]", "[7, 5]"});
}

FUSOR_TEST_CASE("moved tensors hand over their memory") {
  space_tensor<float, extents<int, dynamic>> a(10);
  auto* data = a.data();
  space_tensor<float, extents<int, dynamic>> b(std::move(a));
  CHECK(b.data() == data);
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  a = std::move(b);
  CHECK(a.data() == data);
}

FUSOR_TEST_CASE("a moved-from tensor of static extents is empty") {
  space_tensor<float, extents<int, 2, 2>> a;
  space_tensor<float, extents<int, 2, 2>> b(std::move(a));
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  CHECK(b.size() == 4);
}

FUSOR_TEST_CASE("scratch buffers grow, move and free") {
  buffer<space> scratch(64);
  CHECK(scratch.size() == 64);
  CHECK(scratch.data() != nullptr);
  scratch.reserve(32);
  CHECK(scratch.size() == 64);  // never shrinks
  scratch.reserve(1 << 20);
  CHECK(scratch.size() == (1 << 20));
  buffer<space> other(std::move(scratch));
  CHECK(scratch.data() == nullptr);
  CHECK(other.size() == (1 << 20));
  CHECK(reinterpret_cast<std::uintptr_t>(other.as<float>()) % 16 == 0);
}
