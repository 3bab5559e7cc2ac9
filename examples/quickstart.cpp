// examples/quickstart.cpp — fusor in one page, on the host.
//
// Builds three host tensors with random data, evaluates
//
//     y = gelu(x * w + b)        (b, one row, broadcast over every row of x)
//
// as ONE pass over memory (one loop, no temporaries for x * w or x * w + b),
// checks every element against a plain loop in double precision, and says what
// it did. Exits non-zero if a value is wrong, so ctest runs it as a test.
//
// It includes the focused headers it uses rather than <fusor/fusor.hpp>, which
// keeps its compile time low. README.md shows a cut of this file; ctest builds
// and runs that cut and checks that it still is one (examples/CMakeLists.txt).
#include <cmath>
#include <cstdio>
#include <random>

#include <fusor/core/tensor.hpp>     // fusor::tensor, fusor::extents
#include <fusor/exec/assign.hpp>     // fusor::assign (host executor by default)
#include <fusor/expr/operators.hpp>  // + - * /, gelu, exp, where, ...

using matrix = fusor::dextents<fusor::index_t, 2>;  // shapes known at run time
using row = fusor::dextents<fusor::index_t, 1>;

int main() {
  const fusor::index_t rows = 1000, cols = 64;
  fusor::tensor<float, matrix> x(rows, cols), w(rows, cols), y(rows, cols);
  fusor::tensor<float, row> b(cols);  // a bias row

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  auto fill = [&](auto& t) { for (fusor::index_t i = 0; i < t.size(); ++i) t.data()[i] = uniform(rng); };
  fill(x), fill(w), fill(b);

  // Nothing runs here: an expression is a small value that can be kept and reused.
  auto pre_activation = x * w + b;  // b's shape [64] broadcasts against [1000, 64]
  // One pass: every y(i, j) = gelu(x(i, j) * w(i, j) + b(j)), computed in registers.
  fusor::assign(y, fusor::gelu(pre_activation));

  // The same thing as a plain loop, in double precision.
  double worst = 0;
  for (fusor::index_t i = 0; i < rows; ++i)
    for (fusor::index_t j = 0; j < cols; ++j) {
      const double v = double(x(i, j)) * double(w(i, j)) + double(b(j));
      const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      worst = std::fmax(worst, std::fabs(double(y(i, j)) - want) / std::fmax(1.0, std::fabs(want)));
    }

  std::printf("fusor quickstart: y = gelu(x * w + b) on the host executor\n");
  std::printf("  x, w, y: [%lld, %lld] float;  b: [%lld] float, broadcast over the rows\n",
              (long long)rows, (long long)cols, (long long)cols);
  std::printf("  one fused pass: no temporaries for x * w or x * w + b\n");
  for (fusor::index_t i : {fusor::index_t(0), rows / 2, rows - 1})
    std::printf("  y(%lld, 3) = % .6f   (x = % .4f, w = % .4f, b = % .4f)\n", (long long)i, y(i, 3), x(i, 3),
                w(i, 3), b(3));
  const bool ok = worst <= 1e-5;
  std::printf("  largest relative error against a plain double loop: %.2e -> %s\n", worst, ok ? "OK" : "WRONG");
  return ok ? 0 : 1;
}
