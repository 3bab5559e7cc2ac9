// Matmul's run-time errors, thrown before anything runs and naming what is
// wrong: shapes that do not agree (all of them named), epilogue operands of the
// wrong shape or layout, strides BLAS cannot read, empty products, and a bias
// gradient of a batch that does not flatten. (Static shapes and unsupported
// element types fail to compile: test_matmul_static_*.cpp.)
#include "kernels/test_matmul_support.hpp"

using namespace matmul_test;

FUSOR_TEST_CASE("matmul errors: shapes that do not agree name every shape") {
  space_tensor<float, matrix> a(3, 4), b(5, 6), b_ok(4, 6), c(3, 6), c_wrong(3, 7);
  space_tensor<float, batch_of_matrices> a3(2, 3, 4), c3(3, 3, 6);
  executor ex{};
  expect_error<shape_error>([&] { matmul(c, a, b, ex); }, {"inner dimensions", "[3, 4]", "[5, 6]"});
  expect_error<shape_error>([&] { matmul(c_wrong, a, b_ok, ex); }, {"c [3, 7]", "a [3, 4]", "b [4, 6]"});
  expect_error<shape_error>([&] { matmul(c3, a3, b_ok, ex); }, {"c [3, 3, 6]", "a [2, 3, 4]", "b [4, 6]"});
  space_tensor<float, matrix> empty_a(3, 0), empty_b(0, 6);
  expect_error<shape_error>([&] { matmul(c, empty_a, empty_b, ex); }, {"empty", "[3, 0]", "[0, 6]"});
}

FUSOR_TEST_CASE("matmul errors: epilogue operands of the wrong shape or layout") {
  space_tensor<float, matrix> a(3, 4), b(4, 6), c(3, 6), pre_unpadded(3, 6), pre_wrong(3, 8);
  space_tensor<float, matrix> pre_storage(3, 8);
  space_tensor<float, vector> bias(6), bias_wrong(5), db_wrong(4);
  space_tensor<float, matrix, col_major> c_col(3, 6);
  executor ex{};
  expect_error<shape_error>([&] { matmul(c, a, b, epilogue::bias(bias_wrong), ex); }, {"bias", "[5]", "[3, 6]"});
  expect_error<shape_error>([&] { matmul(c, a, b, epilogue::gelu_tanh(bias, pre_wrong), ex); },
                            {"pre-activation", "[3, 8]", "[3, 6]"});
  expect_error<error>([&] { matmul(c, a, b, epilogue::gelu_tanh(bias, pre_unpadded), ex); },
                      {"multiple of 8", "[6, 1]"});
  relu_mask<space> mask_wrong(matrix(3, 7));
  expect_error<shape_error>([&] { matmul(c, a, b, epilogue::relu(bias, mask_wrong), ex); }, {"relu mask", "[3, 6]"});
  expect_error<shape_error>([&] { matmul(c, a, b, epilogue::relu_backward(relu_mask<space>(matrix(3, 6)), db_wrong), ex); },
                            {"bias gradient", "[4]"});
  // bias_gradient_a sums a's rows: one value per row of a (3), not per column of c.
  expect_error<shape_error>([&] { matmul(c, a, b, epilogue::bias_gradient_a(bias), ex); }, {"bias gradient", "[6]"});
  // Fused epilogues index c's columns through contiguous rows.
  expect_error<error>([&] { matmul(c_col, a, b, epilogue::bias(bias), ex); }, {"rows contiguous", "[1, 3]"});
  // With a correct pre-activation (padded rows) the same call runs.
  matmul(c, a, b, epilogue::gelu_tanh(bias, slice<1>(pre_storage.view(), 0, 6)), ex);
  finish(ex);
}

FUSOR_TEST_CASE("matmul errors: strides BLAS cannot read, and a bias gradient of a batch that does not flatten") {
  space_tensor<float, matrix> storage(3, 8), b(4, 6), c(3, 6);
  // Every other column of storage: no unit stride along either axis.
  using mapping = typename strided::template mapping<matrix>;
  const view<float, matrix, strided, space> every_other(storage.data(),
                                                        mapping(matrix(3, 4), ::cuda::std::array<index_t, 2>{8, 2}));
  executor ex{};
  expect_error<error>([&] { matmul(c, every_other, b, ex); }, {"matmul's a", "[8, 2]", "unit stride"});

  space_tensor<float, batch_of_matrices> a3(2, 3, 4), b3(2, 4, 6), c3(2, 3, 6);
  space_tensor<float, vector> db(6);
  space_tensor<float, batch_of_matrices> pre(2, 3, 8);
  expect_error<error>(
      [&] { matmul(c3, a3, b3, epilogue::gelu_tanh_backward(slice<2>(pre.view(), 0, 6), db), ex); },
      {"bias gradient", "flatten"});
}

FUSOR_TEST_CASE("matmul errors: c sharing memory with a or b is refused; disjoint parts of one tensor are not") {
  // BLAS zeroes c before it reads a and b: a product written over its own input would be all zeros.
  space_tensor<float, matrix> a(3, 3), b(3, 3);
  fill_random(a, 5);
  fill_random(b, 6);
  executor ex{};
  expect_error<error>([&] { matmul(a, a, b, ex); }, {"matmul's c [3, 3]", "overlaps its operand a", "its own input"});
  expect_error<error>([&] { matmul(b, a, transpose(b.view()), ex); }, {"overlaps its operand b", "strides [1, 3]"});
  space_tensor<float, batch_of_matrices> batches(2, 3, 3);
  fill_random(batches, 7);
  expect_error<error>([&] { matmul(batches, batches, b, ex); }, {"matmul's c [2, 3, 3]", "operand a"});
  using four = dextents<index_t, 4>;
  space_tensor<float, four> q(1, 2, 3, 3), k(1, 2, 3, 3);
  fill_random(q, 8);
  fill_random(k, 9);
  expect_error<error>([&] { matmul(k, q, k, ex); }, {"matmul's c [1, 2, 3, 3]", "operand b"});

  // Rows 0-2 of one tensor times b into its rows 3-5: no byte shared, so it runs, and right.
  space_tensor<float, matrix> storage(6, 3);
  fill_random(storage, 10);
  matmul(slice<0>(storage.view(), 3, 6), slice<0>(storage.view(), 0, 3), b, ex);
  finish(ex);
  const auto s = to_host(storage);
  const auto hb = to_host(b);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 3; ++j) {
      double want = 0;
      for (index_t t = 0; t < 3; ++t) want += double(s(i, t)) * double(hb(t, j));
      CHECK(std::fabs(double(s(3 + i, j)) - want) <= 1e-5);
    }
}
