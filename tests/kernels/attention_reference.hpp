// tests/kernels/attention_reference.hpp — what the causal attention tests
// share: a case's sizes, the naive fp64 reference (the whole T x T softmax,
// formed), per-precision tolerances and a comparison relative to the largest
// reference value. Used by test_attention.cpp (every executor) and
// test_attention_flash_emulated.cpp (the tensor-core kernel run on the host).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/rowwise_support.hpp"

namespace attention_test {

using namespace rowwise_test;

using cube_extents = extents<index_t, dynamic, dynamic, dynamic>;

struct attention_case {
  index_t batch, time, heads, kv_heads, head_dim;
  std::string name() const {
    return "B=" + std::to_string(batch) + " T=" + std::to_string(time) + " H=" + std::to_string(heads) +
           " G=" + std::to_string(kv_heads) + " D=" + std::to_string(head_dim);
  }
  index_t width() const { return (heads + 2 * kv_heads) * head_dim; }
};

struct attention_reference {
  std::vector<double> y, lse, dqkv;
};

// The whole T x T softmax per (sample, head), in double; dy may be empty (forward only).
inline attention_reference reference(const std::vector<double>& qkv, const std::vector<double>& dy, const attention_case& c) {
  const index_t T = c.time, D = c.head_dim, W = c.width(), HD = c.heads * D;
  attention_reference out{std::vector<double>(std::size_t(c.batch * T * HD)),
                          std::vector<double>(std::size_t(c.batch * c.heads * T)),
                          std::vector<double>(qkv.size(), 0.0)};
  const double scale = 1 / std::sqrt(double(D));
  std::vector<double> p(std::size_t(T * T)), dp(std::size_t(T * T));
  for (index_t b = 0; b < c.batch; ++b)
    for (index_t h = 0; h < c.heads; ++h) {
      const index_t g = h / (c.heads / c.kv_heads);
      auto q = [&](index_t t, index_t x) { return qkv[std::size_t((b * T + t) * W + h * D + x)]; };
      auto k = [&](index_t t, index_t x) { return qkv[std::size_t((b * T + t) * W + (c.heads + g) * D + x)]; };
      auto v = [&](index_t t, index_t x) {
        return qkv[std::size_t((b * T + t) * W + (c.heads + c.kv_heads + g) * D + x)];
      };
      for (index_t t = 0; t < T; ++t) {
        double m = -INFINITY;
        for (index_t u = 0; u <= t; ++u) {
          double s = 0;
          for (index_t x = 0; x < D; ++x) s += q(t, x) * k(u, x);
          p[std::size_t(t * T + u)] = s * scale;
          m = std::max(m, s * scale);
        }
        double l = 0;
        for (index_t u = 0; u <= t; ++u) l += std::exp(p[std::size_t(t * T + u)] - m);
        for (index_t u = 0; u <= t; ++u) p[std::size_t(t * T + u)] = std::exp(p[std::size_t(t * T + u)] - m) / l;
        out.lse[std::size_t((b * c.heads + h) * T + t)] = m + std::log(l);
        for (index_t x = 0; x < D; ++x) {
          double sum = 0;
          for (index_t u = 0; u <= t; ++u) sum += p[std::size_t(t * T + u)] * v(u, x);
          out.y[std::size_t((b * T + t) * HD + h * D + x)] = sum;
        }
      }
      if (dy.empty()) continue;
      auto g_y = [&](index_t t, index_t x) { return dy[std::size_t((b * T + t) * HD + h * D + x)]; };
      auto dq = [&](index_t t, index_t x) -> double& { return out.dqkv[std::size_t((b * T + t) * W + h * D + x)]; };
      auto dk = [&](index_t t, index_t x) -> double& {
        return out.dqkv[std::size_t((b * T + t) * W + (c.heads + g) * D + x)];
      };
      auto dv = [&](index_t t, index_t x) -> double& {
        return out.dqkv[std::size_t((b * T + t) * W + (c.heads + c.kv_heads + g) * D + x)];
      };
      for (index_t t = 0; t < T; ++t) {
        double delta = 0;
        for (index_t u = 0; u <= t; ++u) {
          double d = 0;
          for (index_t x = 0; x < D; ++x) d += g_y(t, x) * v(u, x);
          dp[std::size_t(t * T + u)] = d;
          delta += p[std::size_t(t * T + u)] * d;
        }
        for (index_t u = 0; u <= t; ++u) {
          const double pu = p[std::size_t(t * T + u)], ds = pu * (dp[std::size_t(t * T + u)] - delta);
          for (index_t x = 0; x < D; ++x) {
            dq(t, x) += scale * ds * k(u, x);
            dk(u, x) += scale * ds * q(t, x);
            dv(u, x) += pu * g_y(t, x);
          }
        }
      }
    }
  return out;
}

// Tolerances relative to the largest reference value of an output: bf16/fp16
// inputs are exact in the reference, so what is left is the kernels' own
// rounding (outputs stored in P; on the GPU also P and dS rounded to P before
// their tensor-core products).
template <class P>
double attention_tolerance() {
  if constexpr (std::is_same_v<P, bfloat16>)
    return 2.5e-2;
  else if constexpr (std::is_same_v<P, float16>)
    return 4e-3;
  else
    return 2e-5;
}

inline double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline void compare(const std::string& what, const std::vector<double>& got, const std::vector<double>& want, double tol,
             index_t columns) {
  REQUIRE(got.size() == want.size());
  checker check(what);
  const double scale = std::max(largest(want), 1e-3);
  for (std::size_t i = 0; i < got.size(); ++i)
    check(got[i], want[i], scale, tol, 0, index_t(i) / columns, index_t(i) % columns);
  check.finish();
}

}  // namespace attention_test
