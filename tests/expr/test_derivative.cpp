// Compile-time derivatives (fusor::derivative) against central finite
// differences in fp64, for every operation an expression can hold and for
// composed expressions, at random points with fixed seeds inside each
// function's domain and away from its kinks; the documented subgradients at
// the kinks; the types of derivatives that vanish (fusor::zero) or are one;
// and a derived expression fused into a backward pass over host tensors.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {

using fusor::arg;

template <std::size_t N>
using point = std::array<double, N>;

// The value of a symbolic expression with arg<k> = p[k], in double.
template <class E, std::size_t N>
double eval_at(const E& e, const point<N>& p) {
  return std::apply([&](auto... x) { return to_double(fusor::evaluate_scalar(fusor::substitute(e, x...))); }, p);
}

template <std::size_t N>
std::string describe(const point<N>& p) {
  std::ostringstream s;
  s.precision(17);
  s << "(";
  for (std::size_t k = 0; k != N; ++k) s << (k ? ", " : "") << p[k];
  return s.str() + ")";
}

// (f(x + h) - f(x - h)) / 2h in argument K, h relative to |x|: truncation
// error ~h^2 |f'''| / 6 ~ 1e-10, rounding ~eps |f| / h ~ 1e-11.
template <std::size_t K, class F, std::size_t N>
double central_difference(const F& f, point<N> p) {
  const double x = p[K];
  const double h = 1e-5 * std::max(1.0, std::fabs(x));
  p[K] = x + h;
  const double up = eval_at(f, p), x_up = p[K];
  p[K] = x - h;
  const double down = eval_at(f, p), x_down = p[K];
  return (up - down) / (x_up - x_down);  // the steps actually taken, after rounding
}

// |derivative - central difference| <= 1e-6 * max(1, |central difference|).
constexpr double fd_tolerance = 1e-6;

// Points drawn uniformly from a box (one interval per argument) with a fixed
// seed, keeping only those `accept` takes (the function's domain, away from kinks).
template <std::size_t N, class Accept>
std::vector<point<N>> sample(std::uint32_t seed, const std::array<std::pair<double, double>, N>& box, Accept accept,
                             int count = 8) {
  std::mt19937 rng(seed);
  std::vector<point<N>> points;
  for (int tries = 0; tries < 100000 && int(points.size()) < count; ++tries) {
    point<N> p;
    for (std::size_t k = 0; k != N; ++k) p[k] = std::uniform_real_distribution<double>(box[k].first, box[k].second)(rng);
    if (accept(p)) points.push_back(p);
  }
  REQUIRE(int(points.size()) == count);
  return points;
}
template <std::size_t N>
std::vector<point<N>> sample(std::uint32_t seed, const std::array<std::pair<double, double>, N>& box, int count = 8) {
  return sample<N>(seed, box, [](const point<N>&) { return true; }, count);
}
// One argument: the interval [low, high].
inline std::vector<point<1>> sample1(std::uint32_t seed, double low, double high, auto accept) {
  return sample<1>(seed, {{{low, high}}}, accept);
}
inline std::vector<point<1>> sample1(std::uint32_t seed, double low, double high) {
  return sample<1>(seed, {{{low, high}}});
}

// d f / d arg<K> against the central difference at every point.
template <std::size_t K, class F, std::size_t N>
void check_partial(const char* name, const F& f, const std::vector<point<N>>& points) {
  const auto df = fusor::derivative(f, arg<K>);
  for (const auto& p : points) {
    const double got = eval_at(df, p), want = central_difference<K>(f, p);
    INFO(name, ": d/d arg<", K, "> at ", describe(p), ": derivative ", got, ", central difference ", want);
    CHECK(close(got, want, fd_tolerance));
  }
}
// The whole gradient: every argument 0..N-1.
template <class F, std::size_t N>
void check_gradient(const char* name, const F& f, const std::vector<point<N>>& points) {
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (check_partial<K>(name, f, points), ...);
  }(std::make_index_sequence<N>{});
}

template <class F, class V>
inline constexpr bool derivative_is_zero_v = std::is_same_v<decltype(fusor::derivative(std::declval<const F&>(), V{})), fusor::zero>;

auto away_from_zero(double margin = 0.05) {
  return [margin](const point<1>& p) { return std::fabs(p[0]) > margin; };
}

}  // namespace

// ---- arithmetic ---------------------------------------------------------------------
TEST_CASE("derivative: + - * / and unary minus match central differences") {
  const auto box = sample<2>(201, {{{-3.0, 3.0}, {-3.0, 3.0}}});
  // Denominators away from zero, both signs.
  const auto den = sample<2>(202, {{{-3.0, 3.0}, {-2.0, 2.0}}}, [](const point<2>& p) { return std::fabs(p[1]) > 0.3; });

  check_gradient("a + b", arg<0> + arg<1>, box);
  check_gradient("a - b", arg<0> - arg<1>, box);
  check_gradient("a * b", arg<0> * arg<1>, box);
  check_gradient("a / b", arg<0> / arg<1>, den);
  check_gradient("-a", -arg<0>, sample1(203, -3.0, 3.0));
  // With literals on either side (weak scalars), and a variable on both sides.
  check_gradient("2.5 - a * 3", 2.5 - arg<0> * 3, sample1(204, -3.0, 3.0));
  check_gradient("1.5 / a", 1.5 / arg<0>, sample1(205, -2.0, 2.0, away_from_zero(0.3)));
  check_gradient("a * a - a / (a + 4)", arg<0> * arg<0> - arg<0> / (arg<0> + 4.0), sample1(206, -3.0, 3.0));
  check_gradient("-(a * b) + b", -(arg<0> * arg<1>) + arg<1>, box);
  // Divided by an integer literal: the reciprocal must not divide in integers (1 / 2 == 0).
  check_gradient("a / 2", arg<0> / 2, sample1(207, -3.0, 3.0));
  check_gradient("a - a / 3", arg<0> - arg<0> / 3, sample1(208, -3.0, 3.0));
  check_gradient("a * a * a / 3", arg<0> * arg<0> * arg<0> / 3, sample1(209, -3.0, 3.0));
  check_gradient("exp(-a * a / 2)", fusor::exp(-arg<0> * arg<0> / 2), sample1(210, -3.0, 3.0));
  CHECK(eval_at(fusor::derivative(arg<0> / 4, arg<0>), point<1>{0.75}) == 0.25);

  // Exact values where the rule is exact.
  CHECK(eval_at(fusor::derivative(arg<0> * arg<1>, arg<0>), point<2>{0.75, -1.25}) == -1.25);
  CHECK(eval_at(fusor::derivative(arg<0> - arg<1>, arg<1>), point<2>{0.75, -1.25}) == -1.0);
  CHECK(eval_at(fusor::derivative(-arg<0>, arg<0>), point<1>{0.75}) == -1.0);
}

// ---- transcendentals and activations ----------------------------------------------------
TEST_CASE("derivative: exp log log1p tanh erf sqrt rsqrt match central differences") {
  check_gradient("exp", fusor::exp(arg<0>), sample1(301, -3.0, 3.0));
  check_gradient("log", fusor::log(arg<0>), sample1(302, 0.1, 5.0));
  check_gradient("log1p", fusor::log1p(arg<0>), sample1(303, -0.9, 5.0));
  check_gradient("tanh", fusor::tanh(arg<0>), sample1(304, -3.0, 3.0));
  check_gradient("erf", fusor::erf(arg<0>), sample1(305, -3.0, 3.0));
  check_gradient("sqrt", fusor::sqrt(arg<0>), sample1(306, 0.05, 5.0));
  check_gradient("rsqrt", fusor::rsqrt(arg<0>), sample1(307, 0.05, 5.0));
}

TEST_CASE("derivative: sigmoid relu gelu gelu_tanh silu softplus abs match central differences") {
  check_gradient("sigmoid", fusor::sigmoid(arg<0>), sample1(401, -6.0, 6.0));
  check_gradient("relu", fusor::relu(arg<0>), sample1(402, -3.0, 3.0, away_from_zero()));
  check_gradient("gelu (erf)", fusor::gelu(arg<0>), sample1(403, -4.0, 4.0));
  check_gradient("gelu_tanh", fusor::gelu_tanh(arg<0>), sample1(404, -4.0, 4.0));
  check_gradient("silu", fusor::silu(arg<0>), sample1(405, -6.0, 6.0));
  check_gradient("softplus", fusor::softplus(arg<0>), sample1(406, -10.0, 10.0));
  check_gradient("abs", fusor::abs(arg<0>), sample1(407, -3.0, 3.0, away_from_zero()));

  // Both sides of each kink are reached by the points above; make sure.
  for (double x : {-1.5, 1.5}) {
    CHECK(eval_at(fusor::derivative(fusor::relu(arg<0>), arg<0>), point<1>{x}) == (x > 0 ? 1.0 : 0.0));
    CHECK(eval_at(fusor::derivative(fusor::abs(arg<0>), arg<0>), point<1>{x}) == (x > 0 ? 1.0 : -1.0));
  }
}

TEST_CASE("derivative: pow in both arguments matches central differences") {
  // Base positive (pow of a negative base is NaN for non-integer exponents).
  const auto points = sample<2>(501, {{{0.2, 3.0}, {-2.5, 2.5}}});
  check_gradient("pow(a, b)", fusor::pow(arg<0>, arg<1>), points);
  check_gradient("pow(a, 3.0)", fusor::pow(arg<0>, 3.0), sample1(502, 0.2, 3.0));
  check_gradient("pow(2.0, b)", fusor::pow(2.0, arg<0>), sample1(503, -2.5, 2.5));
}

TEST_CASE("derivative: min max clamp in every argument match central differences away from ties") {
  const auto pairs =
      sample<2>(601, {{{-2.0, 2.0}, {-2.0, 2.0}}}, [](const point<2>& p) { return std::fabs(p[0] - p[1]) > 0.05; }, 16);
  check_gradient("min(a, b)", fusor::min(arg<0>, arg<1>), pairs);
  check_gradient("max(a, b)", fusor::max(arg<0>, arg<1>), pairs);
  check_gradient("min(a * a, b + 1)", fusor::min(arg<0> * arg<0>, arg<1> + 1.0), pairs);
  // Both orders occur among the points.
  CHECK(std::count_if(pairs.begin(), pairs.end(), [](const point<2>& p) { return p[0] < p[1]; }) > 0);
  CHECK(std::count_if(pairs.begin(), pairs.end(), [](const point<2>& p) { return p[0] > p[1]; }) > 0);

  // clamp(x, low, high) with low < high; x below, inside and above, away from both bounds.
  auto clamp_ok = [](const point<3>& p) {
    return p[1] + 0.2 < p[2] && std::fabs(p[0] - p[1]) > 0.05 && std::fabs(p[0] - p[2]) > 0.05;
  };
  const auto triples = sample<3>(602, {{{-3.0, 3.0}, {-2.0, 0.5}, {-0.5, 2.0}}}, clamp_ok, 24);
  check_gradient("clamp(x, low, high)", fusor::clamp(arg<0>, arg<1>, arg<2>), triples);
  CHECK(std::count_if(triples.begin(), triples.end(), [](const point<3>& p) { return p[0] < p[1]; }) > 0);
  CHECK(std::count_if(triples.begin(), triples.end(), [](const point<3>& p) { return p[1] < p[0] && p[0] < p[2]; }) > 0);
  CHECK(std::count_if(triples.begin(), triples.end(), [](const point<3>& p) { return p[0] > p[2]; }) > 0);
  check_gradient("clamp(x * x, -0.5, 1.5)", fusor::clamp(arg<0> * arg<0>, -0.5, 1.5),
                 sample1(603, -2.0, 2.0, [](const point<1>& p) { return std::fabs(p[0] * p[0] - 1.5) > 0.05; }));
}

TEST_CASE("derivative: where in both branches, and not through its condition") {
  // The condition compares arg<0> with arg<2>; the branches use arg<0> and arg<1>.
  const auto f = fusor::where(arg<0> > arg<2>, fusor::exp(arg<0>) * arg<1>, arg<0> * arg<0> - 3.0 * arg<1>);
  const auto points = sample<3>(701, {{{-2.0, 2.0}, {-2.0, 2.0}, {-2.0, 2.0}}},
                                [](const point<3>& p) { return std::fabs(p[0] - p[2]) > 0.05; }, 16);
  CHECK(std::count_if(points.begin(), points.end(), [](const point<3>& p) { return p[0] > p[2]; }) > 0);
  CHECK(std::count_if(points.begin(), points.end(), [](const point<3>& p) { return p[0] < p[2]; }) > 0);
  check_gradient("where(a > c, exp(a) * b, a * a - 3 b)", f, points);
  // arg<2> only feeds the condition: its derivative is the type zero (and the
  // central difference, away from the switch, is 0 too).
  static_assert(std::is_same_v<decltype(fusor::derivative(f, arg<2>)), fusor::zero>);

  // Leaky relu written with where, a literal in one branch's factor.
  check_gradient("where(a > 0, a, 0.1 a)", fusor::where(arg<0> > 0.0, arg<0>, 0.1 * arg<0>),
                 sample1(702, -3.0, 3.0, away_from_zero()));
  // A constant branch contributes nothing.
  check_gradient("where(a < 1, a * a, 2.0)", fusor::where(arg<0> < 1.0, arg<0> * arg<0>, 2.0),
                 sample1(703, -3.0, 3.0, [](const point<1>& p) { return std::fabs(p[0] - 1.0) > 0.05; }));
}

TEST_CASE("derivative: cast passes the gradient straight through") {
  // The derivative of a bare cast is the type one, whatever it rounds to.
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::cast<float>(arg<0>), arg<0>)), fusor::one>);
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::cast<fusor::bf16>(arg<0>), arg<0>)), fusor::one>);
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::cast<double>(arg<0>), arg<0>)), fusor::one>);
  CHECK(eval_at(fusor::derivative(fusor::cast<float>(arg<0>), arg<0>), point<1>{0.3}) == 1.0);

  // A cast that does not round (double) against central differences.
  check_gradient("cast<double>(a * exp(a))", fusor::cast<double>(arg<0> * fusor::exp(arg<0>)), sample1(801, -2.0, 2.0));
  check_gradient("a * cast<double>(tanh(a))", arg<0> * fusor::cast<double>(fusor::tanh(arg<0>)), sample1(802, -2.0, 2.0));

  // A rounding cast (float, bf16): straight-through means the derivative is the
  // one of the expression without the cast, exactly.
  for (const auto& p : sample1(803, -2.0, 2.0)) {
    const auto inner = arg<0> * fusor::exp(arg<0>);
    const double plain = eval_at(fusor::derivative(inner, arg<0>), p);
    CHECK(eval_at(fusor::derivative(fusor::cast<float>(inner), arg<0>), p) == plain);
    CHECK(eval_at(fusor::derivative(fusor::cast<fusor::bf16>(inner), arg<0>), p) == plain);
  }
}

TEST_CASE("derivative: comparisons and logic have derivative zero, as a type") {
  using a_t = std::remove_cvref_t<decltype(arg<0>)>;
  using b_t = std::remove_cvref_t<decltype(arg<1>)>;
  const auto lt = arg<0> < arg<1>;
  const auto le = arg<0> <= arg<1>;
  const auto gt = arg<0> > arg<1>;
  const auto ge = arg<0> >= arg<1>;
  const auto eq = arg<0> == arg<1>;
  const auto ne = arg<0> != arg<1>;
  const auto land = (arg<0> > 0.0) && (arg<1> > 0.0);
  const auto lor = (arg<0> > 0.0) || (arg<1> > 0.0);
  const auto lnot = !(arg<0> > arg<1>);
  auto both_zero = [&](const auto& e) {
    static_assert(derivative_is_zero_v<std::remove_cvref_t<decltype(e)>, a_t>);
    static_assert(derivative_is_zero_v<std::remove_cvref_t<decltype(e)>, b_t>);
    CHECK(eval_at(fusor::derivative(e, arg<0>), point<2>{0.5, -0.25}) == 0.0);
  };
  both_zero(lt);
  both_zero(le);
  both_zero(gt);
  both_zero(ge);
  both_zero(eq);
  both_zero(ne);
  both_zero(land);
  both_zero(lor);
  both_zero(lnot);
}

TEST_CASE("derivative: an expression that does not depend on the variable has derivative fusor::zero") {
  static_assert(std::is_same_v<decltype(fusor::derivative(arg<1>, arg<0>)), fusor::zero>);
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::exp(arg<1>) * arg<2> + 3.0, arg<0>)), fusor::zero>);
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::where(arg<0> > 0.0, arg<1>, arg<2>), arg<0>)), fusor::zero>);
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::sigmoid(arg<1>) / fusor::sqrt(arg<2>), arg<0>)), fusor::zero>);
  // A view is a constant too: only placeholders are variables.
  float storage[4] = {1, 2, 3, 4};
  const fusor::view<float, extents<int, 4>> x(storage);
  static_assert(std::is_same_v<decltype(fusor::derivative(x * fusor::exp(x) + arg<1>, arg<0>)), fusor::zero>);
  // And arg<K> by itself differentiates to the type one.
  static_assert(std::is_same_v<decltype(fusor::derivative(arg<0>, arg<0>)), fusor::one>);
  static_assert(std::is_same_v<decltype(fusor::derivative(arg<0> + arg<1>, arg<0>)), fusor::one>);
  CHECK(eval_at(fusor::derivative(fusor::exp(arg<1>) * arg<2>, arg<0>), point<3>{1, 2, 3}) == 0.0);
}

TEST_CASE("derivative: the subgradients documented at kinks and ties") {
  // relu'(0) = 0; abs'(0) = 0; ties of min and max go to the first operand.
  CHECK(eval_at(fusor::derivative(fusor::relu(arg<0>), arg<0>), point<1>{0.0}) == 0.0);
  CHECK(eval_at(fusor::derivative(fusor::abs(arg<0>), arg<0>), point<1>{0.0}) == 0.0);
  const point<2> tie{0.625, 0.625};
  CHECK(eval_at(fusor::derivative(fusor::min(arg<0>, arg<1>), arg<0>), tie) == 1.0);
  CHECK(eval_at(fusor::derivative(fusor::min(arg<0>, arg<1>), arg<1>), tie) == 0.0);
  CHECK(eval_at(fusor::derivative(fusor::max(arg<0>, arg<1>), arg<0>), tie) == 1.0);
  CHECK(eval_at(fusor::derivative(fusor::max(arg<0>, arg<1>), arg<1>), tie) == 0.0);
  // The gradient of min / max is never split nor doubled: it sums to one.
  for (const auto& p : sample<2>(901, {{{-1.0, 1.0}, {-1.0, 1.0}}})) {
    CHECK(eval_at(fusor::derivative(fusor::min(arg<0>, arg<1>), arg<0>), p) +
              eval_at(fusor::derivative(fusor::min(arg<0>, arg<1>), arg<1>), p) ==
          1.0);
    CHECK(eval_at(fusor::derivative(fusor::max(arg<0>, arg<1>), arg<0>), p) +
              eval_at(fusor::derivative(fusor::max(arg<0>, arg<1>), arg<1>), p) ==
          1.0);
  }
}

// ---- composed expressions -----------------------------------------------------------------
TEST_CASE("derivative: composed expressions, the gradient in every input") {
  // swish = x * sigmoid(x), against central differences and its closed form.
  const auto swish = arg<0> * fusor::sigmoid(arg<0>);
  const auto swish_points = sample1(1001, -6.0, 6.0);
  check_gradient("x * sigmoid(x)", swish, swish_points);
  for (const auto& p : swish_points) {
    const double s = 1.0 / (1.0 + std::exp(-p[0]));
    CHECK(close(eval_at(fusor::derivative(swish, arg<0>), p), s * (1.0 + p[0] * (1.0 - s)), 1e-14));
  }
  // The API spelled as in the docs: a scalar substituted, evaluated.
  const auto dswish = fusor::derivative(swish, arg<0>);
  const double at = fusor::evaluate_scalar(fusor::substitute(dswish, 0.3));
  const double s3 = 1.0 / (1.0 + std::exp(-0.3));
  CHECK(close(at, s3 * (1.0 + 0.3 * (1.0 - s3)), 1e-14));

  // Two inputs, one in a denominator.
  check_gradient("tanh(a * b) + exp(b) / a", fusor::tanh(arg<0> * arg<1>) + fusor::exp(arg<1>) / arg<0>,
                 sample<2>(1002, {{{-2.0, 2.0}, {-2.0, 2.0}}}, [](const point<2>& p) { return std::fabs(p[0]) > 0.3; }));
  // A unit of a network: gelu(w * x + b), in w, x and b.
  check_gradient("gelu(w * x + b)", fusor::gelu(arg<0> * arg<1> + arg<2>),
                 sample<3>(1003, {{{-2.0, 2.0}, {-2.0, 2.0}, {-1.0, 1.0}}}));
  // Norm, log-sigmoid, softplus inside tanh, and a power of a power.
  check_gradient("sqrt(a * a + b * b)", fusor::sqrt(arg<0> * arg<0> + arg<1> * arg<1>),
                 sample<2>(1004, {{{-2.0, 2.0}, {-2.0, 2.0}}}, [](const point<2>& p) { return std::hypot(p[0], p[1]) > 0.2; }));
  check_gradient("log(sigmoid(a))", fusor::log(fusor::sigmoid(arg<0>)), sample1(1005, -6.0, 6.0));
  check_gradient("tanh(softplus(a) * b) - rsqrt(1 + a * a)",
                 fusor::tanh(fusor::softplus(arg<0>) * arg<1>) - fusor::rsqrt(1.0 + arg<0> * arg<0>),
                 sample<2>(1006, {{{-3.0, 3.0}, {-1.5, 1.5}}}));
  check_gradient("pow(a, b) * log1p(a * b) / erf(b)",
                 fusor::pow(arg<0>, arg<1>) * fusor::log1p(arg<0> * arg<1>) / fusor::erf(arg<1>),
                 sample<2>(1007, {{{0.2, 2.0}, {0.2, 2.0}}}));
  check_gradient("gelu_tanh(silu(a)) * max(a, b) + relu(b - a)",
                 fusor::gelu_tanh(fusor::silu(arg<0>)) * fusor::max(arg<0>, arg<1>) + fusor::relu(arg<1> - arg<0>),
                 sample<2>(1008, {{{-2.0, 2.0}, {-2.0, 2.0}}}, [](const point<2>& p) { return std::fabs(p[0] - p[1]) > 0.05; }));
  // A variable used three times, with cast and where in the chain.
  check_gradient("where(a > 0, cast<double>(a) * exp(-a), abs(a) * a)",
                 fusor::where(arg<0> > 0.0, fusor::cast<double>(arg<0>) * fusor::exp(-arg<0>), fusor::abs(arg<0>) * arg<0>),
                 sample1(1009, -3.0, 3.0, away_from_zero()));
}

TEST_CASE("derivative: second derivatives match central differences of the first") {
  // derivative(derivative(f)) is an expression like any other; its constants are types.
  auto check_second = [](const char* name, const auto& f, const auto& points) {
    const auto df = fusor::derivative(f, arg<0>);
    check_partial<0>(name, df, points);
  };
  check_second("tanh''", fusor::tanh(arg<0>), sample1(1101, -3.0, 3.0));
  check_second("log''", fusor::log(arg<0>), sample1(1102, 0.2, 5.0));
  check_second("sigmoid''", fusor::sigmoid(arg<0>), sample1(1103, -5.0, 5.0));
  check_second("gelu''", fusor::gelu(arg<0>), sample1(1104, -3.0, 3.0));
  check_second("(x * sigmoid(x))''", arg<0> * fusor::sigmoid(arg<0>), sample1(1105, -5.0, 5.0));
  // The derivatives of tanh, sigmoid, silu and gelu_tanh are nodes of their own (ops::*_slope) with rules of their own.
  check_second("silu''", fusor::silu(arg<0>), sample1(1109, -5.0, 5.0));
  check_second("gelu_tanh''", fusor::gelu_tanh(arg<0>), sample1(1110, -3.0, 3.0));
  check_second("tanh'''", fusor::derivative(fusor::tanh(arg<0>), arg<0>), sample1(1111, -3.0, 3.0));
  check_second("sigmoid'''", fusor::derivative(fusor::sigmoid(arg<0>), arg<0>), sample1(1112, -5.0, 5.0));
  check_second("(1 / x)''", 1.0 / arg<0>, sample1(1106, 0.3, 3.0));
  check_second("rsqrt''", fusor::rsqrt(arg<0>), sample1(1107, 0.2, 3.0));
  check_second("(pow(x, 2.5))''", fusor::pow(arg<0>, 2.5), sample1(1108, 0.2, 3.0));
  // relu'' is zero as a type.
  static_assert(std::is_same_v<decltype(fusor::derivative(fusor::derivative(fusor::relu(arg<0>), arg<0>), arg<0>)),
                               fusor::zero>);
}

// ---- a derived expression as a fused backward pass ---------------------------------------
namespace {

using matrix = extents<int, dynamic, dynamic>;

// dx = substitute(df, x) * dy in one host pass (fp32 storage), against the
// scalar evaluation of df at each x in double, times dy.
template <class DF>
void check_backward(const char* name, const DF& df, double low, double high, std::uint32_t seed) {
  host_tensor<float, matrix> x(7, 33), dy(7, 33), dx(7, 33);
  fill_random(x, seed, low, high);
  fill_random(dy, seed + 1);
  poison(dx);
  fusor::assign(dx, fusor::substitute(df, x) * dy);
  index_t misses = 0, first = -1;
  double first_got = 0, first_want = 0;
  for (index_t i = 0; i < dx.size(); ++i) {
    const double want = eval_at(df, point<1>{double(x.data()[i])}) * double(dy.data()[i]);
    const double got = dx.data()[i];
    if (!close(got, want, 1e-5) && misses++ == 0) first = i, first_got = got, first_want = want;
  }
  INFO(name, ": ", misses, " of ", dx.size(), " elements differ; first at ", first, ": got ", first_got, ", want ",
       first_want);
  CHECK(misses == 0);
}

}  // namespace

TEST_CASE("derivative: a custom activation gets a fused backward pass on host tensors") {
  check_backward("swish'", fusor::derivative(arg<0> * fusor::sigmoid(arg<0>), arg<0>), -6.0, 6.0, 1201);
  check_backward("gelu_tanh'", fusor::derivative(fusor::gelu_tanh(arg<0>), arg<0>), -4.0, 4.0, 1203);
  check_backward("gelu'", fusor::derivative(fusor::gelu(arg<0>), arg<0>), -4.0, 4.0, 1205);
  check_backward("(tanh(x) * x + softplus(x))'",
                 fusor::derivative(fusor::tanh(arg<0>) * arg<0> + fusor::softplus(arg<0>), arg<0>), -5.0, 5.0, 1207);
  check_backward("(clamp(x, -1, 1) * relu(x))'", fusor::derivative(fusor::clamp(arg<0>, -1.0, 1.0) * fusor::relu(arg<0>), arg<0>),
                 -2.0, 2.0, 1209);
  check_backward("(log(x) * sqrt(x))'", fusor::derivative(fusor::log(arg<0>) * fusor::sqrt(arg<0>), arg<0>), 0.1, 4.0, 1211);
  // Derivatives that are constants (one, zero) still make a backward pass.
  check_backward("(x + 3)'", fusor::derivative(arg<0> + 3.0, arg<0>), -2.0, 2.0, 1213);
  check_backward("(exp(arg<1>))' in arg<0>", fusor::derivative(fusor::exp(arg<1>), arg<0>), -2.0, 2.0, 1215);
}

TEST_CASE("derivative: a two-input backward pass with a broadcast operand") {
  // f(x, w) = tanh(x * w) + exp(w) / x, with w a row of shape [1, 33] broadcast over x's 7 rows.
  const auto f = fusor::tanh(arg<0> * arg<1>) + fusor::exp(arg<1>) / arg<0>;
  const auto dfdx = fusor::derivative(f, arg<0>);
  const auto dfdw = fusor::derivative(f, arg<1>);
  host_tensor<float, matrix> x(7, 33), w(1, 33), dy(7, 33), dx(7, 33), dw_per_element(7, 33);
  fill_random(x, 1301, 0.5, 2.0);
  fill_random(w, 1302, -1.0, 1.0);
  fill_random(dy, 1303);
  poison(dx);
  poison(dw_per_element);
  fusor::assign_many(fusor::host_executor{}, fusor::out(dx, fusor::substitute(dfdx, x, w) * dy),
                     fusor::out(dw_per_element, fusor::substitute(dfdw, x, w) * dy));
  index_t misses = 0;
  for (index_t r = 0; r < 7; ++r)
    for (index_t c = 0; c < 33; ++c) {
      const point<2> p{double(x(r, c)), double(w(0, c))};
      const double g = double(dy(r, c));
      misses += !close(double(dx(r, c)), eval_at(dfdx, p) * g, 1e-5);
      misses += !close(double(dw_per_element(r, c)), eval_at(dfdw, p) * g, 1e-5);
    }
  CHECK(misses == 0);

  // The same layer with w a view inside the expression (a parameter: constant
  // for the derivative) and only x a placeholder: d/dx is unchanged.
  const auto g = fusor::tanh(arg<0> * w.view()) + fusor::exp(w.view()) / arg<0>;
  const auto dgdx = fusor::derivative(g, arg<0>);
  host_tensor<float, matrix> dx2(7, 33);
  poison(dx2);
  fusor::assign(dx2, fusor::substitute(dgdx, x) * dy);
  index_t differ = 0;
  for (index_t i = 0; i < dx.size(); ++i) differ += !close(double(dx2.data()[i]), double(dx.data()[i]), 1e-6);
  CHECK(differ == 0);
}
