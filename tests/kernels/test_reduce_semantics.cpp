// What reductions promise beyond their numbers: NaN and infinity propagate,
// argmax/argmin ties go to the first logical index (whatever the layout), the
// same call twice gives the same bits, the input is read once per element
// (no temporary), launches are counted, zero elements and integer inputs
// behave as documented, and wrong destinations are shape errors naming both shapes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <fusor/kernels/reduce.hpp>

#include "support/counting_view.hpp"
#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {
using vector_extents = dextents<index_t, 1>;
using matrix_extents = dextents<index_t, 2>;
using scalar_extents = extents<index_t>;

// A host tensor of the given values (row-major), copied to the tested space.
template <class P, class E, class L = row_major>
space_tensor<P, E, L> tensor_of(const E& shape, std::initializer_list<double> values) {
  host_tensor<P, E, L> h(shape);
  ::cuda::std::array<index_t, E::rank()> idx{};
  for (double v : values) {  // logical row-major order, whatever the layout
    if constexpr (E::rank() == 1) h(idx[0]) = convert<storage_t<P>>(v);
    else h(idx[0], idx[1]) = convert<storage_t<P>>(v);
    for (std::size_t k = E::rank(); k-- > 0;) {
      if (++idx[k] < shape.extent(k)) break;
      idx[k] = 0;
    }
  }
  return to_space(h);
}

template <class T>
double scalar_of(const T& t) {
  return to_double(to_host(t).data()[0]);
}

std::uint64_t launches() { return fusor::gpu::launch_count(); }

space_tensor<int, vector_extents> zero_counters(index_t n) {
  host_tensor<int, vector_extents> zeros(n);
  for (index_t i = 0; i < n; ++i) zeros(i) = 0;
  return to_space(zeros);
}
}  // namespace

FUSOR_TEST_CASE("a NaN makes sum, mean, norm, amax and amin NaN, and argmax/argmin point at it") {
  const double nan = std::nan("");
  for (index_t n : {index_t(5), index_t(4099), index_t((1 << 20) + 7)}) {
    host_tensor<float, vector_extents> h(n);
    fill_random(h, 41);
    h(n / 2) = float(nan);
    h(n - 1) = float(nan);  // a second NaN: the first one wins
    const auto x = to_space(h);
    executor ex{};
    CHECK(std::isnan(fusor::sum(x, ex)));
    CHECK(std::isnan(fusor::mean(x, ex)));
    CHECK(std::isnan(fusor::norm(x, ex)));
    CHECK(std::isnan(fusor::sum_of_squares(x * 2, ex)));
    CHECK(std::isnan(fusor::amax(x, ex)));
    CHECK(std::isnan(fusor::amin(x, ex)));
    CHECK(fusor::argmax(x, ex) == n / 2);
    CHECK(fusor::argmin(x, ex) == n / 2);
    space_tensor<bfloat16, scalar_extents> out;
    fusor::amax(out, x + 1, ex);
    finish(ex);
    CHECK(std::isnan(scalar_of(out)));
  }
  // Along an axis only the rows holding a NaN are NaN.
  const auto m = tensor_of<float16>(matrix_extents(3, 4), {1, 2, 3, 4, 5, nan, 7, 8, 9, 10, 11, 12});
  executor ex{};
  space_tensor<float, vector_extents> rows(3);
  space_tensor<std::int32_t, vector_extents> where(3);
  for (int k = 0; k < 3; ++k) {
    if (k == 0) fusor::sum(rows, m, 1, ex);
    if (k == 1) fusor::amax(rows, m, 1, ex);
    if (k == 2) fusor::amin(rows, m, -1, ex);
    finish(ex);
    const auto h = to_host(rows);
    CHECK(!std::isnan(h(0)));
    CHECK(std::isnan(h(1)));
    CHECK(!std::isnan(h(2)));
  }
  fusor::argmax(where, m, 1, ex);
  finish(ex);
  CHECK(to_host(where)(1) == 1);
  CHECK(to_host(where)(2) == 3);
}

FUSOR_TEST_CASE("infinities: amax is inf, inf - inf makes the sum NaN") {
  const double inf = std::numeric_limits<double>::infinity();
  const auto x = tensor_of<float>(vector_extents(6), {1, inf, -3, -inf, 2, 0});
  executor ex{};
  CHECK(fusor::amax(x, ex) == float(inf));
  CHECK(fusor::amin(x, ex) == -float(inf));
  CHECK(fusor::argmax(x, ex) == 1);
  CHECK(fusor::argmin(x, ex) == 3);
  CHECK(std::isnan(fusor::sum(x, ex)));
  CHECK(std::isinf(fusor::norm(x, ex)));
}

FUSOR_TEST_CASE("argmax and argmin ties go to the first logical index, in any layout") {
  executor ex{};
  // Two maxima (7 at 1 and 4) and two minima (-2 at 2 and 5).
  const auto v = tensor_of<bfloat16>(vector_extents(7), {0, 7, -2, 3, 7, -2, 1});
  CHECK(fusor::argmax(v, ex) == 1);
  CHECK(fusor::argmin(v, ex) == 2);
  host_tensor<float, vector_extents> fives(1023);
  for (index_t i = 0; i < 1023; ++i) fives(i) = 5;
  const auto same = to_space(fives);  // every element equal
  CHECK(fusor::argmax(same, ex) == 0);
  CHECK(fusor::argmin(same, ex) == 0);
  // Column-major: memory order visits (1, 0) before (0, 2); the logical first is (0, 2).
  const auto c = tensor_of<float, matrix_extents, col_major>(matrix_extents(2, 3), {0, 1, 9, 9, 2, 3});
  CHECK(fusor::argmax(c, ex) == 2);
  space_tensor<std::int64_t, vector_extents> along_rows(2), along_columns(3);
  fusor::argmax(along_rows, c, 1, ex);
  fusor::argmin(along_columns, c, 0, ex);
  finish(ex);
  CHECK(to_host(along_rows)(0) == 2);
  CHECK(to_host(along_rows)(1) == 0);
  CHECK(to_host(along_columns)(0) == 0);
  CHECK(to_host(along_columns)(1) == 0);
  CHECK(to_host(along_columns)(2) == 1);
  // Many ties in a long bf16 row (values on a coarse grid), split across blocks.
  const index_t n = (1 << 20) + 7;
  host_tensor<bfloat16, vector_extents> h(n);
  for (index_t i = 0; i < n; ++i) h(i) = convert<bfloat16>(double((i * 7919) % 13));
  const auto x = to_space(h);
  CHECK(fusor::argmax(x, ex) == 6);  // 7919 % 13 == 2: the first 12 is at 6
  CHECK(fusor::argmin(x, ex) == 0);
}

FUSOR_TEST_CASE("the same reduction twice gives the same bits") {
  const index_t n = (1 << 20) + 7;
  host_tensor<bfloat16, matrix_extents> hx(3, n);
  host_tensor<float, matrix_extents> hy(3, n);
  fill_random(hx, 61), fill_random(hy, 62);
  const auto x = to_space(hx);
  const auto y = to_space(hy);
  executor ex{};
  auto bits = [](float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  const float first = fusor::sum(x * y + 1, ex), second = fusor::sum(x * y + 1, ex);
  CHECK(bits(first) == bits(second));
  CHECK(bits(fusor::norm(x - y, ex)) == bits(fusor::norm(x - y, ex)));
  space_tensor<float, vector_extents> a(3), b(3);
  fusor::mean(a, x * y, 1, ex);  // few outputs, long axis: split over blocks on the GPU
  fusor::mean(b, x * y, 1, ex);
  finish(ex);
  const auto ha = to_host(a), hb = to_host(b);
  for (index_t i = 0; i < 3; ++i) CHECK(bits(ha(i)) == bits(hb(i)));
  space_tensor<float, vector_extents> c(n), d(n);
  fusor::sum(c, transpose(x.view()), 1, ex);  // many outputs, short axis
  fusor::sum(d, transpose(x.view()), 1, ex);
  finish(ex);
  const auto hc = to_host(c), hd = to_host(d);
  index_t differ = 0;
  for (index_t i = 0; i < n; ++i) differ += bits(hc(i)) != bits(hd(i));
  CHECK(differ == 0);
}

FUSOR_TEST_CASE("an expression is read once per element, in a counted number of launches") {
#if defined(FUSOR_TEST_CUDA)
  const bool on_gpu = true;
#else
  const bool on_gpu = false;
#endif
  for (index_t cols : {index_t(5), index_t(1023), index_t(40000)}) {
    const index_t rows = 7, n = rows * cols;
    host_tensor<float, matrix_extents> hx(rows, cols), hy(rows, cols);
    fill_random(hx, 71), fill_random(hy, 72);
    const auto x = to_space(hx);
    const auto y = to_space(hy);
    auto reads = zero_counters(n), unused = zero_counters(n);
    counting_view cx(x.view(), reads.data(), unused.data());
    executor ex{};
    space_tensor<float, scalar_extents> total;
    const auto before = launches();
    fusor::sum(total, cx * y + 1, ex);
    finish(ex);
    const auto whole_launches = launches() - before;
    CHECK(whole_launches == (on_gpu ? (n <= 1024 ? 1u : 2u) : 0u));
    space_tensor<float, vector_extents> per_row(rows), per_column(cols);
    const auto before_axes = launches();
    fusor::sum(per_row, cx * y + 1, 1, ex);
    fusor::amax(per_column, cx, 0, ex);
    finish(ex);
    CHECK((launches() - before_axes <= (on_gpu ? 4u : 0u)));
    const auto h = to_host(reads);
    index_t wrong = 0;
    for (index_t i = 0; i < n; ++i) wrong += h(i) != 3;  // three reductions, one read each
    INFO("cols = ", cols, ": ", wrong, " of ", n, " elements not read exactly 3 times");
    CHECK(wrong == 0);
    double want = 0;
    for (index_t i = 0; i < n; ++i) want += double(hx.data()[i]) * hy.data()[i] + 1;
    CHECK(close(scalar_of(total), want, 1e-4));
  }
}

FUSOR_TEST_CASE("zero elements, one-element destinations of any rank, integer and static-shape inputs") {
  executor ex{};
  const space_tensor<float, vector_extents> empty(index_t(0));
  CHECK(fusor::sum(empty, ex) == 0.0f);
  CHECK(fusor::norm(empty, ex) == 0.0f);
  CHECK(std::isnan(fusor::mean(empty, ex)));
  expect_error<shape_error>([&] { (void)fusor::amax(empty, ex); }, {"amax", "[0]", "no elements"});
  expect_error<shape_error>([&] { (void)fusor::argmin(empty, ex); }, {"argmin", "[0]"});
  space_tensor<float, matrix_extents> empty_rows(3, 0);
  space_tensor<float, vector_extents> row_sums(3);
  fusor::sum(row_sums, empty_rows, 1, ex);
  finish(ex);
  CHECK(to_host(row_sums)(2) == 0.0f);
  space_tensor<std::int32_t, vector_extents> row_index(3);
  expect_error<shape_error>([&] { fusor::argmax(row_index, empty_rows, 1, ex); }, {"[3, 0]", "no elements"});

  // A [1, 1] destination takes a whole-tensor reduction like a rank-0 one.
  const auto m = tensor_of<float>(matrix_extents(2, 3), {1, 2, 3, 4, 5, 6});
  space_tensor<double, matrix_extents> one(1, 1);
  fusor::sum_of_squares(one, m, ex);
  finish(ex);
  CHECK(scalar_of(one) == 91.0);

  // Integers add in int64 (as PyTorch's sums do); amax keeps the type; mean and norm of integers are double.
  const auto i = tensor_of<std::int32_t>(vector_extents(4), {3, -1, 4, 2});
  CHECK(fusor::sum(i, ex) == 8);
  CHECK(fusor::amax(i, ex) == 4);
  CHECK(fusor::mean(i, ex) == 2.0);
  static_assert(std::is_same_v<decltype(fusor::mean(i, ex)), double>);
  static_assert(std::is_same_v<decltype(fusor::sum(i, ex)), std::int64_t>);
  static_assert(std::is_same_v<decltype(fusor::amax(i, ex)), std::int32_t>);
  {
    // Totals past the element type: 300 x 255 in uint8, 3 x 2e9 in int32 (wrapped, 76500 would be 212 and
    // 6e9 would be 1705032704).
    host_tensor<std::uint8_t, vector_extents> bytes(300);
    host_tensor<std::int32_t, vector_extents> large(3);
    host_tensor<std::uint8_t, matrix_extents> image(2, 300);
    for (index_t k = 0; k < 300; ++k) bytes(k) = 255, image(0, k) = 255, image(1, k) = std::uint8_t(k % 2 * 200);
    for (index_t k = 0; k < 3; ++k) large(k) = 2000000000;
    const auto b = to_space(bytes);
    const auto l = to_space(large);
    const auto im = to_space(image);
    CHECK(fusor::sum(b, ex) == 76500);
    CHECK(fusor::mean(b, ex) == 255.0);
    CHECK(fusor::norm(b, ex) == doctest::Approx(std::sqrt(300.0) * 255.0).epsilon(1e-12));
    CHECK(fusor::sum(l, ex) == 6000000000);
    CHECK(fusor::mean(l, ex) == 2e9);
    CHECK(fusor::sum(b * 2, ex) == 153000);  // an integer expression adds in int64 too
    space_tensor<double, vector_extents> row_means(2);
    fusor::mean(row_means, im, 1, ex);
    finish(ex);
    CHECK(to_host(row_means)(0) == 255.0);
    CHECK(to_host(row_means)(1) == 100.0);
    // A comparison of floats counts in index_t, past float's 2^24 consecutive integers.
    host_tensor<float, vector_extents> host_ones(index_t(1) << 24 | 1);
    std::fill_n(host_ones.data(), host_ones.size(), 1.0f);
    const auto ones = to_space(host_ones);
    static_assert(std::is_same_v<decltype(fusor::sum(ones > 0, ex)), index_t>);
    CHECK(fusor::sum(ones > 0, ex) == (index_t(1) << 24) + 1);
  }
  // Halves of integers: a floating-point literal makes the expression float, not 0 + 0 + 2 + 1.
  CHECK(fusor::sum(i * 0.5, ex) == 4.0f);
  static_assert(std::is_same_v<decltype(fusor::sum(i * 0.5, ex)), float>);
  static_assert(std::is_same_v<decltype(fusor::sum(m, ex)), float>);
  static_assert(std::is_same_v<decltype(fusor::argmax(m, ex)), index_t>);

  // Static extents: the destination's rank says kept or dropped at compile time.
  host_tensor<float, extents<int, 4, 3>> twos;
  for (index_t k = 0; k < 12; ++k) twos.data()[k] = 2;
  const auto s = to_space(twos);
  space_tensor<float, extents<int, 4, 1>> kept;
  space_tensor<float, extents<int, 3>> dropped;
  fusor::sum(kept, s, 1, ex);
  fusor::mean(dropped, s, 0, ex);
  finish(ex);
  CHECK(to_host(kept)(3, 0) == 6.0f);
  CHECK(to_host(dropped)(2) == 2.0f);
}

FUSOR_TEST_CASE("wrong destinations are shape errors naming both shapes") {
  executor ex{};
  const space_tensor<float, matrix_extents> x(3, 4);
  space_tensor<float, vector_extents> two(2), three(3), four(4);
  space_tensor<float, matrix_extents> three_by_one(3, 1), one_by_three(1, 3);
  expect_error<shape_error>([&] { fusor::sum(two, x, ex); }, {"sum", "[3, 4]", "[2]"});
  expect_error<shape_error>([&] { fusor::mean(four, x, 1, ex); }, {"mean", "axis 1", "[3, 4]", "[4]", "[3]"});
  expect_error<shape_error>([&] { fusor::amax(three, x, 0, ex); }, {"amax", "[3, 4]", "[3]", "[4]"});
  expect_error<shape_error>([&] { fusor::norm(one_by_three, x, 1, ex); }, {"[3, 4]", "[1, 3]", "[3, 1]"});
  expect_error<shape_error>([&] { fusor::sum(three_by_one, x, 0, ex); }, {"[3, 4]", "[3, 1]", "[1, 4]"});
  expect_error<shape_error>([&] { fusor::sum(three, x, 2, ex); }, {"axis 2", "[3, 4]", "out of range"});
  expect_error<shape_error>([&] { fusor::sum(three, x, -3, ex); }, {"axis -3", "out of range"});
  space_tensor<std::int32_t, vector_extents> index_out(2);
  expect_error<shape_error>([&] { fusor::argmax(index_out, x, 1, ex); }, {"argmax", "[3, 4]", "[2]"});
}
