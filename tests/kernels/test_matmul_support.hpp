// tests/kernels/test_matmul_support.hpp — what the matmul tests share: operands
// built in any layout from one set of values, fp64 reference products with the
// scale sum_k |a||b| that tolerances are relative to, and per-precision tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <fusor/kernels/matmul.hpp>

#include "support/fusor_test.hpp"

namespace matmul_test {

using namespace fusor_test;
using matrix = dextents<index_t, 2>;
using batch_of_matrices = dextents<index_t, 3>;
using vector = dextents<index_t, 1>;

inline std::uint64_t launches() { return fusor::gpu::launch_count(); }
#if defined(FUSOR_TEST_CUDA)
constexpr int launches_per_matmul = 1;  // one cublasLtMatmul
#else
constexpr int launches_per_matmul = 0;  // the host executor launches nothing
#endif

// Element (batch, i, j) of a host view or tensor of rank 2 (batch ignored), 3, or
// 4 ([B, H, ., .]: batch b * H + h), as double.
template <class V>
double at(const V& x, index_t batch, index_t i, index_t j) {
  const auto& v = as_view(x);
  using view_t = std::remove_cvref_t<decltype(v)>;
  if constexpr (view_t::rank == 4) return to_double(v(batch / v.extent(1), batch % v.extent(1), i, j));
  else if constexpr (view_t::rank == 3) return to_double(v(batch, i, j));
  else return to_double(v(i, j));
}

// A batch of matrices of doubles.
struct doubles {
  index_t batch = 1, rows = 0, cols = 0;
  std::vector<double> values;
  doubles() = default;
  doubles(index_t b, index_t r, index_t c) : batch(b), rows(r), cols(c), values(std::size_t(b * r * c), 0.0) {}
  double& operator()(index_t b, index_t i, index_t j) { return values[std::size_t((b * rows + i) * cols + j)]; }
  double operator()(index_t b, index_t i, index_t j) const { return values[std::size_t((b * rows + i) * cols + j)]; }
};

// a b in double, and sum_k |a||b| per element (what rounding errors scale with).
struct product {
  doubles value, scale;
};
template <class A, class B>
product reference_product(const A& a, const B& b, index_t batch, index_t m, index_t n, index_t k) {
  product p{doubles(batch, m, n), doubles(batch, m, n)};
  for (index_t t = 0; t < batch; ++t)
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double sum = 0, scale = 0;
        for (index_t q = 0; q < k; ++q) {
          const double x = at(a, t, i, q), y = at(b, t, q, j);
          sum += x * y;
          scale += std::fabs(x * y);
        }
        p.value(t, i, j) = sum;
        p.scale(t, i, j) = scale;
      }
  return p;
}

// Relative error allowed, against sum_k |a||b|: the larger of what the inputs'
// precision costs and what storing c costs. tf32 keeps 10 of the inputs' 23
// mantissa bits; converted by truncation that is up to 2 x 2^-10 per product.
template <class PA, class PC>
constexpr double matmul_tolerance() {
  using In = storage_t<PA>;
  using Out = storage_t<PC>;
  double input = std::is_same_v<In, double> ? 1e-12 : 1e-5;
  if (precision_traits<PA>::tensor_float_32 || precision_traits<PC>::tensor_float_32) input = 2e-3;
  double output = 1e-12;
  if constexpr (std::is_same_v<Out, bfloat16>) output = 1e-2;
  else if constexpr (std::is_same_v<Out, float16>) output = 2e-3;
  else if constexpr (std::is_same_v<Out, float>) output = 1e-5;
  return std::max(input, output);
}

// |got - want| <= tol * scale (+ a little for scale 0); reports the first miss
// as "what(batch, i, j)".
struct checker {
  index_t checked = 0, wrong = 0;
  std::string first;
  void operator()(double got, double want, double scale, double tol, const char* what, index_t b, index_t i, index_t j) {
    ++checked;
    if (std::isnan(got) || std::fabs(got - want) > tol * scale + 1e-30) {
      if (!wrong++) {
        std::ostringstream s;
        s << what << "(" << b << ", " << i << ", " << j << "): got " << got << ", want " << want << ", allowed "
          << tol * scale;
        first = s.str();
      }
    }
  }
};
#define MATMUL_CHECK_ALL(checker_)                                               \
  do {                                                                           \
    INFO("checked ", (checker_).checked, ", first wrong: ", (checker_).first);   \
    CHECK((checker_).wrong == 0);                                                \
  } while (0)

// Compares a host copy of c against a reference (c of rank 2 or 3).
template <class C>
void expect_product(const C& c_host, const product& want, double tol, double extra_scale = 0) {
  checker check;
  for (index_t t = 0; t < want.value.batch; ++t)
    for (index_t i = 0; i < want.value.rows; ++i)
      for (index_t j = 0; j < want.value.cols; ++j)
        check(at(c_host, t, i, j), want.value(t, i, j), want.scale(t, i, j) + extra_scale, tol, "c", t, i, j);
  MATMUL_CHECK_ALL(check);
}

// How an operand's memory is laid out.
enum class form { row_major, col_major, transposed_row_major, transposed_col_major };
inline const char* name(form f) {
  switch (f) {
    case form::row_major: return "row-major";
    case form::col_major: return "column-major";
    case form::transposed_row_major: return "transpose of a row-major matrix";
    default: return "transpose of a column-major matrix";
  }
}

// Calls use(view) with a copy of `values` ([rows, cols], host) in the tested
// space, stored in form f. The transposed forms are strided views.
template <class P, class Use>
void with_operand(form f, const host_tensor<P, matrix>& values, Use&& use) {
  const index_t rows = values.extent(0), cols = values.extent(1);
  switch (f) {
    case form::row_major: {
      auto t = to_space(values);
      use(t.view());
      break;
    }
    case form::col_major: {
      host_tensor<P, matrix, col_major> h(rows, cols);
      for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) h(i, j) = values(i, j);
      auto t = to_space(h);
      use(t.view());
      break;
    }
    case form::transposed_row_major: {
      host_tensor<P, matrix> h(cols, rows);
      for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) h(j, i) = values(i, j);
      auto t = to_space(h);
      use(transpose(t.view()));
      break;
    }
    case form::transposed_col_major: {
      host_tensor<P, matrix, col_major> h(cols, rows);
      for (index_t i = 0; i < rows; ++i)
        for (index_t j = 0; j < cols; ++j) h(j, i) = values(i, j);
      auto t = to_space(h);
      use(transpose(t.view()));
      break;
    }
  }
}

template <class P, class E>
host_tensor<P, E> random_host(const E& shape, std::uint32_t seed) {
  host_tensor<P, E> h(shape);
  fill_random(h, seed);
  return h;
}

// A host copy of h with elements of precision To.
template <class To, class P, class E, class L>
host_tensor<To, E> cast_host(const host_tensor<P, E, L>& h) {
  host_tensor<To, E> out(h.extents());
  assign(out, h);
  return out;
}

}  // namespace matmul_test
