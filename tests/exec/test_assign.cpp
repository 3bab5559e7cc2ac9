// Assignment: one pass per assignment (counted per element, and per launch on
// CUDA and under the emulated GPU), every layout, broadcasting, aliasing, several outputs, unaligned and
// strided views.
#include <type_traits>
#include <vector>

#include "support/counting_view.hpp"
#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {
using matrix_extents = extents<int, dynamic, dynamic>;
using vector_extents = extents<int, dynamic>;

// Zeroed counters, one per element, in the tested space.
space_tensor<int, vector_extents> counters(index_t n) {
  host_tensor<int, vector_extents> zeros(n);
  for (index_t i = 0; i < n; ++i) zeros(i) = 0;
  return to_space(zeros);
}

void expect_all_equal(const space_tensor<int, vector_extents>& counts, int expected, const char* what) {
  const auto h = to_host(counts);
  index_t wrong = 0;
  for (index_t i = 0; i < h.size(); ++i) wrong += h(i) != expected;
  INFO(what, ": ", wrong, " of ", h.size(), " elements not touched exactly ", expected, " time(s)");
  CHECK(wrong == 0);
}

std::uint64_t launches() { return fusor::gpu::launch_count(); }

// A leaf with only the members every leaf has (developer guide, "Adding an
// expression leaf"): no load_row, so a broadcast pass that reads it is strided.
template <class View>
struct plain_leaf {
  using value_type = typename View::value_type;
  using extents_type = typename View::extents_type;
  using space = typename View::space;
  static constexpr std::size_t rank = View::rank;
  static constexpr bool weak = false;
  static constexpr std::size_t narrowest_element = View::narrowest_element;
  View inner;
  FUSOR_HOST_DEVICE const extents_type& extents() const { return inner.extents(); }
  template <std::size_t R>
  FUSOR_HOST_DEVICE value_type at(const ::cuda::std::array<index_t, R>& idx) const {
    return inner.at(idx);
  }
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE fusor::lanes<value_type, V> load(index_t i) const {
    return inner.template load<V, Aligned>(i);
  }
  template <std::size_t R>
  bool linear_with(const fusor::dense_shape<R>& dst) const {
    return inner.linear_with(dst);
  }
  bool aligned16() const { return inner.aligned16(); }
};
#if defined(FUSOR_TEST_CUDA) || defined(FUSOR_TEST_EMULATED)
constexpr int launches_per_assignment = 1;
#else
constexpr int launches_per_assignment = 0;  // the host executor launches nothing: one loop
#endif
}  // namespace

FUSOR_TEST_CASE("one pass: each input element read once, each output element written once") {
  for (index_t n : {index_t(1), index_t(3), index_t(1023), index_t((1 << 20) + 7)}) {
    host_tensor<float, vector_extents> ha(n), hb(n), hc(n);
    fill_random(ha, 1), fill_random(hb, 2), fill_random(hc, 3);
    auto a = to_space(ha), b = to_space(hb), c = to_space(hc);
    space_tensor<float, vector_extents> y(n);
    auto ra = counters(n), rb = counters(n), rc = counters(n), wy = counters(n), unused = counters(n);
    counting_view ca(a.view(), ra.data(), unused.data()), cb(b.view(), rb.data(), unused.data()),
        cc(c.view(), rc.data(), unused.data()), cy(y.view(), unused.data(), wy.data());
    executor ex{};
    const auto before = launches();
    assign(cy, ca * 2.0 + sigmoid(cb) * cc - cc / 3.0 * 0 + 1, ex);
    finish(ex);
    CHECK(launches() - before == launches_per_assignment);
    INFO("n = ", n);
    expect_all_equal(ra, 1, "reads of a");
    expect_all_equal(rb, 1, "reads of b");
    expect_all_equal(rc, 2, "reads of c (it appears twice)");
    expect_all_equal(wy, 1, "writes of y");
    const auto hy = to_host(y);
    for (index_t i = 0; i < n; i += 1 + n / 97) {
      const double want = 2.0 * ha(i) + 1 / (1 + std::exp(-double(hb(i)))) * hc(i) + 1;
      CHECK(close(hy(i), want, 1e-5));
    }
  }
}

FUSOR_TEST_CASE("one pass on the strided path: transposed inputs, counted") {
  const index_t rows = 37, cols = 53;
  host_tensor<float, matrix_extents> ha(cols, rows);  // read through its transpose
  fill_random(ha, 5);
  auto a = to_space(ha);
  space_tensor<float, matrix_extents> y(rows, cols);  // row-major: a's transpose is column-major
  auto ra = counters(rows * cols), wy = counters(rows * cols), unused = counters(rows * cols);
  auto at = transpose(a.view());
  counting_view ca(at, ra.data(), unused.data());
  counting_view cy(y.view(), unused.data(), wy.data());
  executor ex{};
  const auto [p, plan] = make_pass(out(cy, exp(ca)));
  CHECK(!plan.linear);
  // The transpose of a row-major matrix is laid out like a column-major one.
  space_tensor<float, matrix_extents, col_major> same_order(rows, cols);
  CHECK(make_pass(out(same_order, exp(at))).second.linear);
  const auto before = launches();
  assign(cy, exp(ca), ex);
  finish(ex);
  CHECK(launches() - before == launches_per_assignment);
  expect_all_equal(ra, 1, "reads of a");
  expect_all_equal(wy, 1, "writes of y");
  const auto hy = to_host(y);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) CHECK(close(hy(i, j), std::exp(double(ha(j, i))), 1e-6));
}

FUSOR_TEST_CASE("several outputs in one pass see the old values of each other") {
  const index_t n = 4099;
  host_tensor<float, vector_extents> hp(n), hm(n), hg(n);
  fill_random(hp, 7), fill_random(hm, 8), fill_random(hg, 9);
  auto p = to_space(hp), m = to_space(hm), g = to_space(hg);
  executor ex{};
  const auto before = launches();
  // A momentum step: both updates read the old m.
  assign_many(ex, out(m, 0.9 * m + g), out(p, p - 0.1 * (0.9 * m + g)));
  finish(ex);
  CHECK(launches() - before == launches_per_assignment);
  const auto p1 = to_host(p), m1 = to_host(m);
  for (index_t i = 0; i < n; ++i) {
    const double m_new = 0.9 * hm(i) + hg(i);
    CHECK(close(m1(i), m_new, 1e-6));
    CHECK(close(p1(i), hp(i) - 0.1 * m_new, 1e-6));
  }
}

FUSOR_TEST_CASE("elementwise aliasing: x = x * 2 + y") {
  for (index_t n : {index_t(3), index_t(1023), index_t((1 << 20) + 7)}) {
    host_tensor<float16, vector_extents> hx(n), hy(n);
    fill_random(hx, 21), fill_random(hy, 22);
    auto x = to_space(hx), y = to_space(hy);
    executor ex{};
    assign(x, x * 2 + y, ex);
    finish(ex);
    const auto got = to_host(x);
    index_t wrong = 0;
    for (index_t i = 0; i < n; ++i) wrong += !close(to_double(got(i)), 2 * to_double(hx(i)) + to_double(hy(i)), 2e-3);
    CHECK(wrong == 0);
  }
}

FUSOR_TEST_CASE("an operand that overlaps the destination other than element for element is refused") {
  host_tensor<float, matrix_extents> hs(4, 4);
  fill_random(hs, 23);
  auto sq = to_space(hs);
  space_tensor<float, matrix_extents> other(4, 4);
  poison(other);
  executor ex{};
  const auto refused = [&](auto&& action, const char* operand) {
    expect_error<error>(action, {"destination [4, 4] (strides [4, 1])", operand, "overlaps", "another tensor first"});
  };
  refused([&] { assign(sq, transpose(sq.view()), ex); }, "[4, 4] (strides [1, 4])");
  refused([&] { assign(sq, sq + transpose(sq.view()), ex); }, "(strides [1, 4])");
  refused([&] { assign(sq, sq - slice<0>(sq.view(), 1, 2), ex); }, "[1, 4] (strides [4, 1])");  // row 1, broadcast
  // A rank-0 view of its first element, broadcast: every element after the first would read the new one.
  const view<float, extents<index_t>, row_major, space> first(sq.data());
  refused([&] { assign(sq, sq / first, ex); }, "[] (strides [])");
  const view<float, extents<index_t>, row_major, space> last(sq.data() + 15);
  refused([&] { assign(sq, sq / last, ex); }, "[] (strides [])");
  // Shifted by a row: row i of the destination would read row i + 1.
  const auto rows_0_3 = slice<0>(sq.view(), 0, 3), rows_1_4 = slice<0>(sq.view(), 1, 4);
  expect_error<error>([&] { assign(rows_0_3, rows_1_4 * 2, ex); }, {"destination [3, 4]", "overlaps"});
  refused([&] { assign_many(ex, out(other, sq * 1), out(sq, transpose(other.view()) + transpose(sq.view()))); },
          "(strides [1, 4])");
  // What is allowed: element for element, and overlapping memory not written.
  assign(other, transpose(sq.view()), ex);
  assign(sq, sq * 2 + other, ex);
  finish(ex);
  const auto got = to_host(sq);
  int wrong = 0;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) wrong += got(i, j) != 2 * hs(i, j) + hs(j, i);
  CHECK(wrong == 0);  // and the refused calls changed nothing
}

FUSOR_TEST_CASE("broadcasting: missing leading axes, size-1 axes and scalars") {
  const index_t rows = 67, cols = 129;
  host_tensor<bfloat16, matrix_extents> hx(rows, cols), hcol(rows, 1);
  host_tensor<bfloat16, vector_extents> hbias(cols);
  fill_random(hx, 31), fill_random(hcol, 32), fill_random(hbias, 33);
  auto x = to_space(hx), col = to_space(hcol);
  auto bias = to_space(hbias);
  space_tensor<float, matrix_extents> y(rows, cols);
  poison(y);
  executor ex{};
  assign(y, gelu(x + bias) * col - 0.5, ex);
  finish(ex);
  const auto hy = to_host(y);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) {
      const double v = to_double(hx(i, j)) + to_double(hbias(j));
      const double want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))) * to_double(hcol(i, 0)) - 0.5;
      CHECK(close(hy(i, j), want, 1e-5));
    }
}

// Broadcast operands along the destination's innermost axis go by rows: V
// elements a step, vector loads of the operands that run along the rows, one
// element of those broadcast along them (exec/pass_kernels.hpp's row_pass_body
// on the GPU and under the emulator; the host executor walks them element by
// element), where an operand's type shows the broadcast and every row starts
// 16-byte aligned. Each case: the plan, then every value against a plain loop.
FUSOR_TEST_CASE("broadcast operands along the innermost axis: the row path's plans and values") {
  const index_t rows = 37, cols = 128;  // 128: whole 16-byte steps of fp32 (4) and bf16 (8)
  host_tensor<float, matrix_extents> hx(rows, cols), hcol(rows, 1), hwide(rows, cols + 1);
  host_tensor<float, vector_extents> hbias(cols);
  fill_random(hx, 81), fill_random(hcol, 82), fill_random(hbias, 83), fill_random(hwide, 84);
  auto x = to_space(hx), col = to_space(hcol), wide = to_space(hwide);
  auto bias = to_space(hbias);
  executor ex{};

  // A bias row and a column, counted: x and y once an element, the bias once a row.
  space_tensor<float, matrix_extents> y(rows, cols);
  poison(y);
  auto rx = counters(rows * cols), rb = counters(cols), wy = counters(rows * cols), unused = counters(rows * cols);
  counting_view cx(x.view(), rx.data(), unused.data());
  counting_view cb(bias.view(), rb.data(), unused.data());
  counting_view cy(y.view(), unused.data(), wy.data());
  const auto [p, plan] = make_pass(out(cy, gelu(cx + cb) * col));
  CHECK(!plan.linear);
  CHECK(plan.rows);
  CHECK(plan.aligned);
  const auto before = launches();
  assign(cy, gelu(cx + cb) * col, ex);
  finish(ex);
  CHECK(launches() - before == launches_per_assignment);
  expect_all_equal(rx, 1, "reads of x");
  expect_all_equal(wy, 1, "writes of y");
  expect_all_equal(rb, int(rows), "reads of the bias (once a row)");
  const auto hy = to_host(y);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) {
      const double v = double(hx(i, j)) + hbias(j);
      CHECK(close(hy(i, j), 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))) * hcol(i, 0), 1e-5));
    }

  // Rows that start off 16-byte alignment (columns 1..cols of a wider matrix) stay strided; bf16 out (V = 8).
  auto shifted = slice<1>(wide.view(), 1, cols + 1);
  space_tensor<bfloat16, matrix_extents> z(rows, cols);
  poison(z);
  CHECK(!make_pass(out(z, shifted - bias)).second.rows);
  assign(z, shifted - bias, ex);
  finish(ex);
  const auto hz = to_host(z);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) CHECK(close(to_double(hz(i, j)), double(hwide(i, j + 1)) - hbias(j), 1e-2));

  // A size-1 axis known only at run time, among full-rank operands, does not show in the types: strided.
  CHECK(!make_pass(out(y, x * col)).second.rows);

  // Rank 3, column-major destination: rows run along axis 0, which a [5, 3] operand lacks (broadcast).
  using cube = extents<int, dynamic, dynamic, dynamic>;
  host_tensor<float, cube, col_major> ha(64, 5, 3);
  host_tensor<float, matrix_extents, col_major> hs(5, 3);
  fill_random(ha, 85), fill_random(hs, 86);
  auto a = to_space(ha);
  auto sc = to_space(hs);
  space_tensor<float, cube, col_major> c(64, 5, 3);
  poison(c);
  const auto [pc, plan_c] = make_pass(out(c, a * sc + 2));
  CHECK(plan_c.rows);
  CHECK(pc.inner_axis() == 0);
  assign(c, a * sc + 2, ex);
  finish(ex);
  const auto hc = to_host(c);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 3; ++k) CHECK(close(hc(i, j, k), double(ha(i, j, k)) * hs(j, k) + 2, 1e-6));

  // Not rows: a leaf without load_row in the tree; a row length that is no whole number of steps; an operand
  // transposed against the rows.
  const plain_leaf<std::remove_cvref_t<decltype(x.view())>> plain{x.view()};
  space_tensor<float, matrix_extents> v(rows, cols);
  poison(v);
  CHECK(!make_pass(out(v, plain * bias + 1)).second.rows);
  assign(v, plain * bias + 1, ex);
  finish(ex);
  const auto hv = to_host(v);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < cols; ++j) CHECK(close(hv(i, j), double(hx(i, j)) * hbias(j) + 1, 1e-6));
  space_tensor<float, matrix_extents> odd(rows, cols - 1);
  CHECK(!make_pass(out(odd, slice<1>(x.view(), 0, cols - 1) + slice<0>(bias.view(), 0, cols - 1))).second.rows);
  host_tensor<float, matrix_extents> hsquare(cols, cols);
  fill_random(hsquare, 87);
  auto square = to_space(hsquare);
  space_tensor<float, matrix_extents> t(cols, cols);
  poison(t);
  const auto [pt, plan_t] = make_pass(out(t, transpose(square.view()) + bias));
  CHECK(!plan_t.linear);
  CHECK(!plan_t.rows);
  assign(t, transpose(square.view()) + bias, ex);
  finish(ex);
  const auto ht = to_host(t);
  for (index_t i = 0; i < cols; ++i)
    for (index_t j = 0; j < cols; ++j) CHECK(close(ht(i, j), double(hsquare(j, i)) + hbias(j), 1e-6));
}

FUSOR_TEST_CASE("every layout: row- and column-major, nchw and nhwc, mixed in one expression") {
  using image = extents<int, 2, 3, dynamic, 5>;
  host_tensor<float, image, nchw> ha(4);
  host_tensor<bfloat16, image, nhwc> hb(4);
  fill_random(ha, 41), fill_random(hb, 42);
  auto a = to_space(ha);
  auto b = to_space(hb);
  space_tensor<float, image, nhwc> y(4);
  space_tensor<float16, image, nchw> z(4);
  poison(y), poison(z);
  executor ex{};
  assign_many(ex, out(y, a * b + 1), out(z, a - b));
  finish(ex);
  const auto hy = to_host(y);
  const auto hz = to_host(z);
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 3; ++c)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w) {
          CHECK(close(hy(n, c, h, w), ha(n, c, h, w) * to_double(hb(n, c, h, w)) + 1, 1e-6));
          CHECK(close(to_double(hz(n, c, h, w)), ha(n, c, h, w) - to_double(hb(n, c, h, w)), 2e-3));
        }

  host_tensor<float, matrix_extents, col_major> hm(33, 17);
  host_tensor<float, matrix_extents, row_major> hr(33, 17);
  fill_random(hm, 43), fill_random(hr, 44);
  auto m = to_space(hm);
  auto r = to_space(hr);
  space_tensor<float, matrix_extents, col_major> s(33, 17);
  poison(s);
  assign(s, m * r, ex);
  finish(ex);
  const auto hs = to_host(s);
  for (int i = 0; i < 33; ++i)
    for (int j = 0; j < 17; ++j) CHECK(close(hs(i, j), double(hm(i, j)) * hr(i, j), 1e-6));
}

FUSOR_TEST_CASE("unaligned and strided views are correct") {
  const index_t n = 1027;
  host_tensor<float, vector_extents> hx(n + 1), hy(n + 1);
  fill_random(hx, 51), fill_random(hy, 52);
  auto x = to_space(hx), y = to_space(hy);
  // One element in: the pointers are 4 bytes off 16-byte alignment.
  auto xs = slice<0>(x.view(), 1, n + 1);
  auto ys = slice<0>(y.view(), 1, n + 1);
  const auto [p, plan] = make_pass(out(ys, tanh(xs)));
  CHECK(plan.linear);
  CHECK(!plan.aligned);
  executor ex{};
  assign(ys, tanh(xs) + ys, ex);
  finish(ex);
  const auto got = to_host(y);
  CHECK(got(0) == hy(0));  // outside the slice: untouched
  for (index_t i = 1; i <= n; ++i) CHECK(close(got(i), std::tanh(double(hx(i))) + hy(i), 1e-6));

  // Every other column of a matrix, written through a transposed view.
  host_tensor<float, matrix_extents> hm(8, 12);
  fill_random(hm, 53);
  auto m = to_space(hm);
  space_tensor<float, matrix_extents> t(6, 8);
  poison(t);
  auto every_other = permute<1, 0>(m.view());  // 12 x 8
  assign(t, slice<0>(every_other, 3, 9) * 2, ex);
  finish(ex);
  const auto ht = to_host(t);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 8; ++j) CHECK(ht(i, j) == 2 * hm(j, i + 3));
}

FUSOR_TEST_CASE("static extents and the fast path") {
  host_tensor<float, extents<int, 64, 48>> ha;
  host_tensor<float, extents<int, 48>> hb;
  fill_random(ha, 61), fill_random(hb, 62);
  auto a = to_space(ha);
  auto b = to_space(hb);
  space_tensor<float, extents<int, 64, 48>> y;
  poison(y);
  const auto [p, plan] = make_pass(out(y, a * a));
  CHECK(plan.linear);
  CHECK(plan.aligned);
  executor ex{};
  assign(y, a * a - b, ex);
  finish(ex);
  const auto hy = to_host(y);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 48; ++j) CHECK(close(hy(i, j), double(ha(i, j)) * ha(i, j) - hb(j), 1e-6));
}

#if defined(FUSOR_TEST_CUDA) || defined(FUSOR_TEST_EMULATED)
FUSOR_TEST_CASE("launch policies: given block size and items per thread, or derived") {
  const index_t n = (1 << 20) + 7;
  host_tensor<float, vector_extents> hx(n);
  fill_random(hx, 71);
  auto x = to_space(hx);
#if defined(FUSOR_TEST_CUDA)
  created_stream s;
  const auto executor_for = [&](launch_policy policy) { return cuda_executor{s.stream, policy}; };
  const launch_policy odd_block{2, 0};  // not a whole warp
#else
  const auto executor_for = [](launch_policy policy) { return emulated_gpu_executor{policy}; };
  const launch_policy odd_block{32, 0};  // the emulator runs whole warps
#endif
  for (launch_policy policy : {launch_policy{}, launch_policy{128, 1}, launch_policy{256, 4}, launch_policy{64, 0},
                               odd_block, launch_policy{0, 3}}) {
    INFO("block ", policy.block_size, ", items ", policy.items_per_thread);
    space_tensor<float, vector_extents> y(n);
    poison(y);
    const executor ex = executor_for(policy);
    const auto before = launches();
    assign(y, silu(x), ex);
    finish(ex);
    CHECK(launches() - before == 1);
    const auto hy = to_host(y);
    index_t wrong = 0;
    for (index_t i = 0; i < n; ++i) wrong += !close(hy(i), hx(i) / (1 + std::exp(-double(hx(i)))), 1e-5);
    CHECK(wrong == 0);
  }
}
#endif
