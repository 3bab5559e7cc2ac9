// fusor/expr/host_math.hpp — exp and tanh of a float on the host in a form
// the compiler vectorises. libm's expf and tanhf are a call per element, which
// keeps a fused host loop scalar: GELU's tanh was 30% of a GPT training step
// (bench_gpt_host) before these. The GPU uses CUDA's own functions.
#pragma once

#include <bit>

#include "fusor/config.hpp"

namespace fusor::detail {

// 2^k * p(r) with k = round(x / ln 2) and Cephes' degree-6 polynomial for
// |r| <= ln(2) / 2, within 2 ulp of expf. exp(NaN) = NaN, exp(+inf) = +inf
// (as does any overflow), exp(-inf) = 0.
FUSOR_FORCE_INLINE float host_exp(float x) {
  const float clamped = x > -104.0f ? (x < 89.0f ? x : 89.0f) : -104.0f;  // NaN: -104, replaced below
  const float k = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = clamped - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^k as two normal powers of two, so k in [-150, 129] over- and underflows as expf does.
  const int k_int = int(k), half = k_int >> 1;
  const float scale_a = std::bit_cast<float>((half + 127) << 23);
  const float scale_b = std::bit_cast<float>((k_int - half + 127) << 23);
  const float result = p * scale_a * scale_b;
  return x != x ? x : result;
}

// Cephes' tanhf: an odd polynomial below |x| = 0.625 (relative accuracy where
// tanh x ~ x), 1 - 2 / (exp(2|x|) + 1) above, both computed and one chosen so
// the loop has no branch. Within a few ulp of tanhf; tanh(NaN) = NaN.
FUSOR_FORCE_INLINE float host_tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float s = x * x;
  const float small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s +
                        1.33314422036e-1f) * s - 3.33332819422e-1f) * s * x + x;
  const float e = host_exp(2.0f * (a < 44.0f ? a : 44.0f));  // tanh is 1 in float long before 44
  const float large_magnitude = 1.0f - 2.0f / (e + 1.0f);
  const float large = x < 0.0f ? -large_magnitude : large_magnitude;
  return a < 0.625f ? small : (x != x ? x : large);
}

}  // namespace fusor::detail
