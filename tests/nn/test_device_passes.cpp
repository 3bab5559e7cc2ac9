// The per-element functions that conv2d's and max_pool2d's CUDA kernels run
// (one thread per element), called on the host for every element and compared
// with the host loops, which the other tests check against double loops: the
// GPU's index arithmetic is tested even where no GPU is.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/max_pool2d.hpp>

using namespace fusor;

namespace {
std::vector<double> random_vector(index_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = u(rng);
  return v;
}
void check_equal(const std::vector<double>& a, const std::vector<double>& b, double tolerance, const char* what) {
  REQUIRE(a.size() == b.size());
  int failures = 0;
  for (std::size_t i = 0; i < a.size() && failures < 5; ++i)
    if (!(std::fabs(a[i] - b[i]) <= tolerance)) {
      ++failures;
      FAIL_CHECK(what << "[" << i << "]: element-wise " << a[i] << ", host loop " << b[i]);
    }
}

template <class G>
void check_conv_passes(index_t batch) {
  using im2row = nn::detail::im2row_pass<double, G>;
  using row2im = nn::detail::row2im_pass<double, double, G>;
  using to_nchw = nn::detail::rows_to_nchw_pass<double, double, G>;
  using to_rows = nn::detail::nchw_to_rows_pass<double, double, G>;
  const index_t rows = batch * G::positions;
  const auto x = random_vector(batch * G::image_size, 1);
  std::vector<double> by_element(std::size_t(rows * G::columns), NAN), by_loop(by_element.size(), NAN);
  for (index_t e = 0; e < rows * G::columns; ++e) im2row{x.data(), by_element.data()}.element(e);
  for (index_t n = 0; n < batch; ++n) im2row{x.data(), by_loop.data()}.sample(n);
  check_equal(by_element, by_loop, 0, "im2row");

  const auto columns = random_vector(rows * G::columns, 2);
  std::vector<double> dx_element(x.size(), NAN), dx_loop(x.size(), NAN);
  for (index_t e = 0; e < batch * G::image_size; ++e) row2im{columns.data(), dx_element.data(), nullptr, 0}.element(e);
  for (index_t n = 0; n < batch; ++n) row2im{columns.data(), dx_loop.data(), nullptr, 0}.sample(n, nullptr);
  check_equal(dx_element, dx_loop, 1e-12, "row2im");  // sums in another order

  const auto z = random_vector(rows * G::out_channels, 3), bias = random_vector(G::out_channels, 4);
  std::vector<double> y_element(z.size(), NAN), y_loop(z.size(), NAN);
  for (index_t e = 0; e < index_t(z.size()); ++e) to_nchw{z.data(), bias.data(), y_element.data()}.element(e);
  for (index_t n = 0; n < batch; ++n) to_nchw{z.data(), bias.data(), y_loop.data()}.sample(n);
  check_equal(y_element, y_loop, 0, "rows_to_nchw");

  std::vector<double> dz_element(z.size(), NAN), dz_loop(z.size(), NAN), db(std::size_t(G::out_channels), NAN);
  for (index_t e = 0; e < index_t(z.size()); ++e) to_rows{y_loop.data(), dz_element.data(), nullptr, batch}.element(e);
  to_rows{y_loop.data(), dz_loop.data(), db.data(), batch}.channels(0, G::out_channels);
  check_equal(dz_element, dz_loop, 0, "nchw_to_rows");
  // Back to rows, less the bias, is z; the host's bias gradient sums each channel.
  std::vector<double> round_trip(z.size()), sums(std::size_t(G::out_channels), 0.0);
  for (std::size_t i = 0; i < z.size(); ++i) {
    round_trip[i] = dz_loop[i] - bias[i % std::size_t(G::out_channels)];
    sums[i % std::size_t(G::out_channels)] += dz_loop[i];
  }
  check_equal(round_trip, z, 1e-15, "nchw_to_rows(rows_to_nchw(z)) - bias");
  check_equal(db, sums, 1e-12, "nchw_to_rows bias gradient");
}
}  // namespace

TEST_CASE("conv2d's CUDA element functions agree with the host loops (index arithmetic, padding, strides)") {
  // in, H, W, out, kernel, stride, padding, out H, out W
  check_conv_passes<nn::detail::conv_geometry<3, 7, 9, 4, 3, 2, 1, 4, 5>>(2);
  check_conv_passes<nn::detail::conv_geometry<2, 6, 5, 3, 3, 1, 1, 6, 5>>(3);
  check_conv_passes<nn::detail::conv_geometry<3, 8, 7, 2, 2, 3, 2, 4, 4>>(2);
  check_conv_passes<nn::detail::conv_geometry<2, 5, 9, 4, 5, 1, 0, 1, 5>>(2);
}

TEST_CASE("max_pool2d's CUDA element functions agree with the host loops") {
  auto check = [&]<class G>(index_t planes) {
    const auto x = random_vector(planes * G::inputs_per_plane, 5);
    const auto dy = random_vector(planes * G::outputs_per_plane, 6);
    std::vector<double> y_element(dy.size(), NAN), y_loop(dy.size(), NAN);
    std::vector<std::int32_t> where_element(dy.size(), -1), where_loop(dy.size(), -1);
    using forward = nn::detail::pool_forward_pass<double, double, G>;
    using backward = nn::detail::pool_backward_pass<double, double, G>;
    for (index_t o = 0; o < index_t(dy.size()); ++o) forward{x.data(), y_element.data(), where_element.data()}(o);
    for (index_t p = 0; p < planes; ++p) forward{x.data(), y_loop.data(), where_loop.data()}.plane(p);
    check_equal(y_element, y_loop, 0, "pool forward");
    CHECK(where_element == where_loop);
    std::vector<double> dx_element(x.size(), NAN), dx_loop(x.size(), NAN);
    for (index_t e = 0; e < index_t(x.size()); ++e) backward{dy.data(), dx_element.data(), where_loop.data()}(e);
    for (index_t p = 0; p < planes; ++p) backward{dy.data(), dx_loop.data(), where_loop.data()}.plane(p);
    check_equal(dx_element, dx_loop, 1e-15, "pool backward");
  };
  // height, width, window, stride, out height, out width
  check.template operator()<nn::detail::pool_geometry<6, 7, 2, 2, 3, 3>>(5);
  check.template operator()<nn::detail::pool_geometry<7, 8, 3, 2, 3, 3>>(4);
  check.template operator()<nn::detail::pool_geometry<5, 5, 2, 1, 4, 4>>(3);
  check.template operator()<nn::detail::pool_geometry<9, 9, 2, 3, 3, 3>>(2);  // stride past the window: gaps
}
