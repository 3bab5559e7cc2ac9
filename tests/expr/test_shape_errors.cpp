// Run-time shape errors: dynamic shapes that do not broadcast, destinations of
// another shape, destinations of one assignment that differ, slices out of
// range. Each must throw fusor::shape_error naming both shapes (or the slice
// and the shape) before anything runs: the destinations keep their contents.
// Shapes that do broadcast or fit are checked alongside, so the checks are not
// merely strict.
#include <string>

#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {

using matrix = extents<int, dynamic, dynamic>;
using vector_extents = extents<int, dynamic>;

// A host matrix of the given shape with a fixed, recognisable content.
host_tensor<float, matrix> numbered(index_t rows, index_t cols, float offset = 0.0f) {
  host_tensor<float, matrix> h(rows, cols);
  for (index_t i = 0; i < h.size(); ++i) h.data()[i] = offset + float(i);
  return h;
}

// Whether t (in the tested space) still holds numbered(rows, cols, offset).
template <class T>
bool untouched(const T& t, float offset = 0.0f) {
  const auto h = to_host(t);
  for (index_t i = 0; i < h.size(); ++i)
    if (h.data()[i] != offset + float(i)) return false;
  return true;
}

}  // namespace

FUSOR_TEST_CASE("shape errors: dynamic operands that do not broadcast throw when the expression is built") {
  auto a = to_space(numbered(3, 4));
  auto b = to_space(numbered(5, 4));
  // Both shapes are named, in the order written.
  CHECK_THROWS_WITH_AS(a + b, doctest::Contains("[3, 4]"), shape_error);
  CHECK_THROWS_WITH_AS(a + b, doctest::Contains("[5, 4]"), shape_error);
  // And the operation, by its functor's name (fusor::ops::multiplies).
  CHECK_THROWS_WITH_AS(b * a,
                       "fusor: shapes [5, 4] and [3, 4] do not broadcast (axis 0: 5 vs 3), the operands of multiplies",
                       shape_error);
  // Deeper in a tree, through unary nodes and literals, and in where's branches.
  CHECK_THROWS_WITH_AS(exp(a) * 2.0f + sigmoid(b), doctest::Contains("[3, 4] and [5, 4]"), shape_error);
  CHECK_THROWS_WITH_AS(exp(a) * 2.0f + sigmoid(b), doctest::Contains("the operands of plus"), shape_error);
  CHECK_THROWS_WITH_AS(where(a > 0.0f, a, b), doctest::Contains("[3, 4] and [5, 4]"), shape_error);
  CHECK_THROWS_WITH_AS(clamp(a, b, 1.0f), doctest::Contains("[3, 4] and [5, 4]"), shape_error);
  // Different ranks, aligned from the right: [2, 3, 4] with [5, 4] fails on axis 1.
  space_tensor<float, extents<int, dynamic, dynamic, dynamic>> c(2, 3, 4);
  CHECK_THROWS_WITH_AS(c - b, doctest::Contains("[2, 3, 4] and [5, 4]"), shape_error);
  // The last axis disagreeing: [3, 4] with [4].
  space_tensor<float, vector_extents> v(4 + 1);
  CHECK_THROWS_WITH_AS(a * v, doctest::Contains("[3, 4] and [5]"), shape_error);
  // Mixed static and dynamic extents: the dynamic one is checked at run time.
  space_tensor<float, extents<int, dynamic, 4>> d(5);
  CHECK_THROWS_WITH_AS(a + d, doctest::Contains("[3, 4] and [5, 4]"), shape_error);
  // A symbolic expression checks its operands when they are substituted.
  const auto f = fusor::arg<0> * fusor::sigmoid(fusor::arg<1>);
  CHECK_THROWS_WITH_AS(fusor::substitute(f, a, b), doctest::Contains("[3, 4] and [5, 4]"), shape_error);
  // The exception is thrown while building: nothing reaches an assignment.
  bool built = false;
  CHECK_THROWS_AS(([&] {
                    auto e = a + b;
                    built = true;
                    (void)e;
                  }()),
                  shape_error);
  CHECK_FALSE(built);
}

FUSOR_TEST_CASE("shape errors: shapes that do broadcast are accepted and computed") {
  executor ex{};
  auto a = to_space(numbered(3, 4));
  auto row = to_space(numbered(1, 4, 100.0f));
  auto column = to_space(numbered(3, 1, 200.0f));
  space_tensor<float, vector_extents> v(4);
  {
    host_tensor<float, vector_extents> hv(4);
    for (index_t i = 0; i < 4; ++i) hv.data()[i] = 300.0f + float(i);
    copy(v, hv);
  }
  space_tensor<float, matrix> y(3, 4);
  poison(y);
  CHECK_NOTHROW(assign(y, a + row + column + v, ex));
  finish(ex);
  const auto h = to_host(y);
  for (index_t r = 0; r < 3; ++r)
    for (index_t c = 0; c < 4; ++c) CHECK(h(r, c) == float(r * 4 + c) + (100.0f + c) + (200.0f + r) + (300.0f + c));
}

FUSOR_TEST_CASE("shape errors: assigning to a destination of another shape throws and writes nothing") {
  executor ex{};
  auto a = to_space(numbered(3, 4));
  auto row = to_space(numbered(1, 4));

  // [3, 4] into [4, 4].
  auto y = to_space(numbered(4, 4, 1000.0f));
  CHECK_THROWS_WITH_AS(assign(y, a * 2.0f, ex), doctest::Contains("[3, 4]"), shape_error);
  CHECK_THROWS_WITH_AS(assign(y, a * 2.0f, ex), doctest::Contains("[4, 4]"), shape_error);
  CHECK_THROWS_WITH_AS(assign(y, a * 2.0f, ex),
                       "fusor: cannot assign an expression of shape [3, 4] to a destination of shape [4, 4]", shape_error);
  // [3, 4] into [3, 5]: the last axis.
  auto z = to_space(numbered(3, 5, 2000.0f));
  CHECK_THROWS_WITH_AS(assign(z, exp(a), ex), doctest::Contains("[3, 4] to a destination of shape [3, 5]"), shape_error);
  // A destination never broadcasts: [3, 4] into [1, 4].
  auto narrow = to_space(numbered(1, 4, 3000.0f));
  CHECK_THROWS_WITH_AS(assign(narrow, a + row, ex), doctest::Contains("[3, 4] to a destination of shape [1, 4]"),
                       shape_error);
  // Nothing ran: the destinations keep what they held.
  finish(ex);
  CHECK(untouched(y, 1000.0f));
  CHECK(untouched(z, 2000.0f));
  CHECK(untouched(narrow, 3000.0f));

  // What does fit: the same shape, and an expression broadcast into the destination.
  space_tensor<float, matrix> w(3, 4);
  poison(w);
  CHECK_NOTHROW(assign(w, row * 1.0f, ex));  // [1, 4] spread over [3, 4]
  finish(ex);
  const auto h = to_host(w);
  for (index_t r = 0; r < 3; ++r)
    for (index_t c = 0; c < 4; ++c) CHECK(h(r, c) == float(c));
}

FUSOR_TEST_CASE("shape errors: destinations of different shapes in one assign_many throw and write nothing") {
  executor ex{};
  auto a = to_space(numbered(3, 4));
  auto b = to_space(numbered(4, 3));
  auto y1 = to_space(numbered(3, 4, 1000.0f));
  auto y2 = to_space(numbered(4, 3, 2000.0f));
  auto y3 = to_space(numbered(3, 4, 3000.0f));
  CHECK_THROWS_WITH_AS(assign_many(ex, out(y1, a + 1.0f), out(y2, b * 2.0f)), doctest::Contains("[3, 4]"), shape_error);
  CHECK_THROWS_WITH_AS(assign_many(ex, out(y1, a + 1.0f), out(y2, b * 2.0f)), doctest::Contains("[4, 3]"), shape_error);
  CHECK_THROWS_WITH_AS(assign_many(ex, out(y1, a + 1.0f), out(y2, b * 2.0f)),
                       "fusor: destinations of one assignment differ in shape: [3, 4] and [4, 3]", shape_error);
  // The odd one out third: no target is written, not even the first two.
  CHECK_THROWS_WITH_AS(assign_many(ex, out(y1, a + 1.0f), out(y3, a - 1.0f), out(y2, b)),
                       doctest::Contains("[3, 4] and [4, 3]"), shape_error);
  // Matching destinations, but one expression that does not fit its own destination.
  CHECK_THROWS_WITH_AS(assign_many(ex, out(y1, a + 1.0f), out(y3, b)),
                       doctest::Contains("[4, 3] to a destination of shape [3, 4]"), shape_error);
  finish(ex);
  CHECK(untouched(y1, 1000.0f));
  CHECK(untouched(y2, 2000.0f));
  CHECK(untouched(y3, 3000.0f));

  // Same shapes: accepted, both written in one pass.
  CHECK_NOTHROW(assign_many(ex, out(y1, a + 1.0f), out(y3, a - 1.0f)));
  finish(ex);
  const auto h1 = to_host(y1), h3 = to_host(y3);
  for (index_t i = 0; i < 12; ++i) {
    CHECK(h1.data()[i] == float(i) + 1.0f);
    CHECK(h3.data()[i] == float(i) - 1.0f);
  }
}

FUSOR_TEST_CASE("shape errors: slices out of range throw naming the slice and the shape") {
  auto a = to_space(numbered(3, 4));
  const auto v = a.view();
  CHECK_THROWS_WITH_AS(slice<0>(v, 2, 5), "fusor: slice [2, 5) of axis 0 is outside shape [3, 4]", shape_error);
  CHECK_THROWS_WITH_AS(slice<1>(v, 0, 5), doctest::Contains("slice [0, 5) of axis 1 is outside shape [3, 4]"),
                       shape_error);
  CHECK_THROWS_WITH_AS(slice<0>(v, -1, 2), doctest::Contains("slice [-1, 2) of axis 0"), shape_error);
  CHECK_THROWS_WITH_AS(slice<1>(v, 3, 2), doctest::Contains("slice [3, 2) of axis 1"), shape_error);
  CHECK_THROWS_WITH_AS(slice<0>(v, 4, 4), doctest::Contains("[3, 4]"), shape_error);
  // The whole axis and an empty slice at the end are in range.
  CHECK_NOTHROW(slice<0>(v, 0, 3));
  CHECK_NOTHROW(slice<1>(v, 4, 4));
  CHECK(slice<1>(v, 1, 3).extent(1) == 2);

  // A slice that is in range but does not broadcast with another operand.
  auto b = to_space(numbered(3, 4));
  CHECK_THROWS_WITH_AS(slice<0>(v, 0, 2) + b, doctest::Contains("[2, 4] and [3, 4]"), shape_error);
  // ... nor fit a destination.
  executor ex{};
  CHECK_THROWS_WITH_AS(assign(slice<1>(b.view(), 0, 3), a * 1.0f, ex),
                       doctest::Contains("[3, 4] to a destination of shape [3, 3]"), shape_error);
  finish(ex);
  CHECK(untouched(b));
}
