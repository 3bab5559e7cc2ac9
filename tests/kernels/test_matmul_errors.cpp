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
