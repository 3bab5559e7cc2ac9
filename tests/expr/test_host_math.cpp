// expr/host_math.hpp: the host's vectorisable exp and tanh against the
// double-precision library on a dense sweep (and the special values), within
// a few float ulp; and the fused tanh / gelu_tanh passes use them.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include <doctest/doctest.h>

#include <fusor/expr/host_math.hpp>

namespace {
// |got - want| in units of the float spacing at want.
double ulps(float got, double want) {
  const double spacing = std::nextafter(float(want), std::numeric_limits<float>::infinity()) - float(want);
  return std::abs(double(got) - want) / (spacing > 0 ? spacing : std::numeric_limits<float>::denorm_min());
}
}  // namespace

TEST_CASE("host_exp is within 2 ulp of exp, and keeps NaN, infinities and underflow") {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.000731f) worst = std::max(worst, ulps(fusor::detail::host_exp(x), std::exp(double(x))));
  CHECK(worst <= 2.0);
  CHECK(std::isnan(fusor::detail::host_exp(std::nanf(""))));
  CHECK(fusor::detail::host_exp(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(fusor::detail::host_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(fusor::detail::host_exp(200.0f) == std::numeric_limits<float>::infinity());
}

TEST_CASE("host_tanh is within a few ulp of tanh over the whole range, odd, and keeps NaN") {
  double worst = 0, worst_at = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.0001373f) {
    const double u = ulps(fusor::detail::host_tanh(x), std::tanh(double(x)));
    if (u > worst) worst = u, worst_at = x;
  }
  INFO("worst " << worst << " ulp at " << worst_at);
  CHECK(worst <= 4.0);
  // Tiny arguments: tanh x = x to float precision (relative, not absolute, accuracy).
  for (const float x : {1e-30f, 1e-8f, -3e-5f, 1e-3f}) CHECK(ulps(fusor::detail::host_tanh(x), std::tanh(double(x))) <= 1.0);
  CHECK(fusor::detail::host_tanh(0.0f) == 0.0f);
  CHECK(fusor::detail::host_tanh(100.0f) == 1.0f);
  CHECK(fusor::detail::host_tanh(-std::numeric_limits<float>::infinity()) == -1.0f);
  CHECK(std::isnan(fusor::detail::host_tanh(std::nanf(""))));
  for (float x = 0.01f; x < 10.0f; x *= 1.37f) CHECK(fusor::detail::host_tanh(-x) == -fusor::detail::host_tanh(x));
}
