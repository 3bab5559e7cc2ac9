// Every elementwise operation against a double-precision reference loop, for
// fp32, bf16 and fp16 storage, at odd sizes (1, 3, 1023, 2^20 + 7).
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>

#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {

constexpr index_t sizes[] = {1, 3, 1023, (1 << 20) + 7};

using vector_extents = extents<int, dynamic>;

struct range {
  double low, high;
};

// Compares y[i] with reference(inputs[i]...) for every i, and reports the first miss.
template <class P, class... Hosts>
void expect_matches(const char* what, const host_tensor<P, vector_extents>& y,
                    const std::function<double(const double*)>& reference, const Hosts&... inputs) {
  index_t misses = 0, first = -1;
  double first_got = 0, first_want = 0;
  for (index_t i = 0; i < y.size(); ++i) {
    const double args[] = {to_double(inputs.data()[i])...};
    const double want = reference(args);
    const double got = to_double(y.data()[i]);
    if (!close(got, want, tolerance<P>())) {
      if (misses++ == 0) first = i, first_got = got, first_want = want;
    }
  }
  INFO(what, ": ", misses, " of ", y.size(), " elements differ; first at ", first, ": got ", first_got, ", want ",
       first_want);
  CHECK(misses == 0);
}

// y = make(x) on the tested executor, against reference(x) in double.
template <class P>
void check_unary(const char* what, range r, auto make, double (*reference)(double)) {
  std::uint32_t seed = 11;
  for (index_t n : sizes) {
    host_tensor<P, vector_extents> hx(n);
    fill_random(hx, seed++, r.low, r.high);
    auto x = to_space(hx);
    space_tensor<P, vector_extents> y(n);
    poison(y);
    executor ex{};
    assign(y, make(x.view()), ex);
    finish(ex);
    expect_matches<P>(what, to_host(y), [&](const double* a) { return reference(a[0]); }, hx);
  }
}

template <class P>
void check_binary(const char* what, range ra, range rb, auto make, double (*reference)(double, double)) {
  std::uint32_t seed = 101;
  for (index_t n : sizes) {
    host_tensor<P, vector_extents> ha(n), hb(n);
    fill_random(ha, seed++, ra.low, ra.high);
    fill_random(hb, seed++, rb.low, rb.high);
    auto a = to_space(ha);
    auto b = to_space(hb);
    space_tensor<P, vector_extents> y(n);
    poison(y);
    executor ex{};
    assign(y, make(a.view(), b.view()), ex);
    finish(ex);
    expect_matches<P>(what, to_host(y), [&](const double* v) { return reference(v[0], v[1]); }, ha, hb);
  }
}

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

template <class P>
void check_all_unary() {
  constexpr range any{-3, 3}, positive{0.1, 4};
  check_unary<P>("exp", any, [](auto x) { return exp(x); }, [](double x) { return std::exp(x); });
  check_unary<P>("log", positive, [](auto x) { return log(x); }, [](double x) { return std::log(x); });
  check_unary<P>("log1p", positive, [](auto x) { return log1p(x); }, [](double x) { return std::log1p(x); });
  check_unary<P>("tanh", any, [](auto x) { return tanh(x); }, [](double x) { return std::tanh(x); });
  check_unary<P>("erf", any, [](auto x) { return erf(x); }, [](double x) { return std::erf(x); });
  check_unary<P>("sigmoid", any, [](auto x) { return sigmoid(x); }, sigmoid_ref);
  check_unary<P>("relu", any, [](auto x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; });
  check_unary<P>("gelu", any, [](auto x) { return gelu(x); }, gelu_ref);
  check_unary<P>("gelu_tanh", any, [](auto x) { return gelu_tanh(x); }, gelu_tanh_ref);
  check_unary<P>("silu", any, [](auto x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); });
  check_unary<P>("softplus", any, [](auto x) { return softplus(x); },
                 [](double x) { return std::log1p(std::exp(x)); });
  check_unary<P>("sqrt", positive, [](auto x) { return sqrt(x); }, [](double x) { return std::sqrt(x); });
  check_unary<P>("rsqrt", positive, [](auto x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); });
  check_unary<P>("abs", any, [](auto x) { return abs(x); }, [](double x) { return std::fabs(x); });
  check_unary<P>("negate", any, [](auto x) { return -x; }, [](double x) { return -x; });
  check_unary<P>("scalar arithmetic", any, [](auto x) { return 2.5 * x - 1 + x / 4.0; },
                 [](double x) { return 2.5 * x - 1 + x / 4.0; });
  check_unary<P>("clamp", any, [](auto x) { return clamp(x, -1.0, 0.5); },
                 [](double x) { return std::min(std::max(x, -1.0), 0.5); });
  check_unary<P>("cast to bf16", any, [](auto x) { return cast<fusor::bf16>(x); },
                 [](double x) { return double(float(bfloat16(float(x)))); });
}

template <class P>
void check_all_binary() {
  constexpr range any{-3, 3}, away_from_zero{0.5, 2}, positive{0.1, 3}, exponent{-2, 2};
  check_binary<P>("plus", any, any, [](auto a, auto b) { return a + b; }, [](double a, double b) { return a + b; });
  check_binary<P>("minus", any, any, [](auto a, auto b) { return a - b; }, [](double a, double b) { return a - b; });
  check_binary<P>("multiplies", any, any, [](auto a, auto b) { return a * b; },
                  [](double a, double b) { return a * b; });
  check_binary<P>("divides", any, away_from_zero, [](auto a, auto b) { return a / b; },
                  [](double a, double b) { return a / b; });
  check_binary<P>("pow", positive, exponent, [](auto a, auto b) { return pow(a, b); },
                  [](double a, double b) { return std::pow(a, b); });
  check_binary<P>("min", any, any, [](auto a, auto b) { return min(a, b); },
                  [](double a, double b) { return std::min(a, b); });
  check_binary<P>("max", any, any, [](auto a, auto b) { return max(a, b); },
                  [](double a, double b) { return std::max(a, b); });
  check_binary<P>("less", any, any, [](auto a, auto b) { return a < b; }, [](double a, double b) { return double(a < b); });
  check_binary<P>("less_equal", any, any, [](auto a, auto b) { return a <= b; },
                  [](double a, double b) { return double(a <= b); });
  check_binary<P>("greater", any, any, [](auto a, auto b) { return a > b; },
                  [](double a, double b) { return double(a > b); });
  check_binary<P>("greater_equal", any, any, [](auto a, auto b) { return a >= b; },
                  [](double a, double b) { return double(a >= b); });
  check_binary<P>("equal_to", any, any, [](auto a, auto b) { return a == a + 0 * b; },
                  [](double, double) { return 1.0; });
  check_binary<P>("not_equal_to", any, any, [](auto a, auto b) { return a != b; },
                  [](double a, double b) { return double(a != b); });
  check_binary<P>("logic", any, any, [](auto a, auto b) { return (a > 0 && b > 0) || !(a > -1); },
                  [](double a, double b) { return double((a > 0 && b > 0) || !(a > -1)); });
  check_binary<P>("where", any, any, [](auto a, auto b) { return where(a > b, a * b, b - 1); },
                  [](double a, double b) { return a > b ? a * b : b - 1; });
  check_binary<P>("clamp with operand bounds", any, any, [](auto a, auto b) { return clamp(a, b - 1, b + 1); },
                  [](double a, double b) { return std::min(std::max(a, b - 1), b + 1); });
}

}  // namespace

FUSOR_TEST_CASE("unary operations match a double reference: fp32") { check_all_unary<fusor::fp32>(); }
FUSOR_TEST_CASE("unary operations match a double reference: bf16") { check_all_unary<fusor::bf16>(); }
FUSOR_TEST_CASE("unary operations match a double reference: fp16") { check_all_unary<fusor::fp16>(); }
FUSOR_TEST_CASE("binary operations match a double reference: fp32") { check_all_binary<float>(); }
FUSOR_TEST_CASE("binary operations match a double reference: bf16") { check_all_binary<bfloat16>(); }
FUSOR_TEST_CASE("binary operations match a double reference: fp16") { check_all_binary<float16>(); }

FUSOR_TEST_CASE("NaN propagates through min, max and relu") {
  host_tensor<float, vector_extents> ha(4), hb(4);
  const float nan = std::nanf("");
  const float a_values[] = {nan, 1.f, nan, -2.f};
  const float b_values[] = {0.f, nan, 1.f, 3.f};
  for (int i = 0; i < 4; ++i) ha(i) = a_values[i], hb(i) = b_values[i];
  auto a = to_space(ha);
  auto b = to_space(hb);
  space_tensor<float, vector_extents> lo(4), hi(4), r(4);
  executor ex{};
  assign_many(ex, out(lo, min(a, b)), out(hi, max(a, b)), out(r, relu(a)));
  finish(ex);
  auto hlo = to_host(lo), hhi = to_host(hi), hr = to_host(r);
  CHECK(std::isnan(hlo(0)));
  CHECK(std::isnan(hlo(1)));
  CHECK(std::isnan(hhi(2)));
  CHECK(hlo(3) == -2.f);
  CHECK(hhi(3) == 3.f);
  CHECK(std::isnan(hr(0)));
  CHECK(hr(1) == 1.f);
  CHECK(hr(3) == 0.f);
}

FUSOR_TEST_CASE("a comparison met by arithmetic counts as 0 or 1") {
  host_tensor<float, vector_extents> hx(1000);
  fill_random(hx, 81);
  auto x = to_space(hx);
  space_tensor<float, vector_extents> y(1000);
  poison(y);
  executor ex{};
  assign(y, x * (x > 0) + where(x, 1, 0) * 0.5, ex);  // where's condition: true when nonzero
  finish(ex);
  const auto hy = to_host(y);
  for (int i = 0; i < 1000; ++i) CHECK(hy(i) == (hx(i) > 0 ? hx(i) : 0.f) + (hx(i) != 0 ? 0.5f : 0.f));
}

FUSOR_TEST_CASE("functions of real numbers of an integer tensor compute in float; integer arithmetic stays integer") {
  // In int, exp(2) would be 7 and tanh of anything but 0 would be 0.
  constexpr int n = 300;
  host_tensor<std::int32_t, vector_extents> hi(n);
  std::mt19937 rng(89);
  for (int k = 0; k < n; ++k) hi(k) = std::int32_t(rng() % 12) + 1;  // 1 to 12: in every function's domain
  auto i = to_space(hi);
  static_assert(std::is_same_v<decltype(exp(i.view()))::value_type, float>);
  static_assert(std::is_same_v<decltype(pow(i.view(), i.view()))::value_type, float>);
  static_assert(std::is_same_v<decltype(relu(i.view()) + i.view())::value_type, std::int32_t>);
  const auto expect = [&](const char* what, auto expression, double (*reference)(double)) {
    space_tensor<float, vector_extents> y(n);
    poison(y);
    executor ex{};
    assign(y, expression, ex);
    finish(ex);
    const auto h = to_host(y);
    int wrong = 0;
    for (int k = 0; k < n; ++k) wrong += !close(h(k), reference(hi(k)), tolerance<fusor::fp32>());
    INFO(what, ": ", wrong, " of ", n, " wrong");
    CHECK(wrong == 0);
  };
  const auto v = i.view();
  expect("exp", exp(v), [](double x) { return std::exp(x); });
  expect("log", log(v), [](double x) { return std::log(x); });
  expect("log1p", log1p(v), [](double x) { return std::log1p(x); });
  expect("sqrt", sqrt(v), [](double x) { return std::sqrt(x); });
  expect("rsqrt", rsqrt(v), [](double x) { return 1 / std::sqrt(x); });
  expect("tanh", tanh(v - 6), [](double x) { return std::tanh(x - 6); });
  expect("erf", erf(v - 6), [](double x) { return std::erf(x - 6); });
  expect("sigmoid", sigmoid(v - 6), [](double x) { return 1 / (1 + std::exp(6 - x)); });
  expect("silu", silu(v - 6), [](double x) { return (x - 6) / (1 + std::exp(6 - x)); });
  expect("softplus", softplus(v - 6), [](double x) { return std::log1p(std::exp(x - 6)); });
  expect("gelu", gelu(v - 6), [](double x) { return 0.5 * (x - 6) * (1 + std::erf((x - 6) / std::sqrt(2.0))); });
  expect("gelu_tanh", gelu_tanh(v - 6), [](double x) {
    const double u = x - 6;
    return 0.5 * u * (1 + std::tanh(0.79788456080286535588 * (u + 0.044715 * u * u * u)));
  });
  expect("pow", pow(v, v - 9), [](double x) { return std::pow(x, x - 9); });
}

FUSOR_TEST_CASE("an integer operand met by a floating-point literal computes in float, not truncating it") {
  constexpr int n = 1000;
  host_tensor<std::int32_t, vector_extents> hi(n);
  std::mt19937 rng(83);
  for (int k = 0; k < n; ++k) hi(k) = std::int32_t(rng() % 201) - 100;
  auto i = to_space(hi);
  using int_view = std::remove_cvref_t<decltype(i.view())>;
  static_assert(std::is_same_v<decltype(i * 1.5)::value_type, float>);
  static_assert(std::is_same_v<decltype(i * 2)::value_type, std::int32_t>);  // an integer literal: integer
  static_assert(std::is_same_v<promote_t<int_view, literal<float>>, float>);
  space_tensor<float, vector_extents> scaled(n), shifted(n), below(n);
  poison(scaled), poison(shifted), poison(below);
  executor ex{};
  assign_many(ex, out(scaled, i * 1.5), out(shifted, i + 0.75), out(below, i < 2.5));
  finish(ex);
  const auto h_scaled = to_host(scaled), h_shifted = to_host(shifted), h_below = to_host(below);
  int wrong = 0;
  for (int k = 0; k < n; ++k) {
    wrong += h_scaled(k) != float(hi(k) * 1.5) || h_shifted(k) != float(hi(k) + 0.75) ||
             h_below(k) != (hi(k) < 2.5 ? 1.f : 0.f);
  }
  CHECK(wrong == 0);
}
