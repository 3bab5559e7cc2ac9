// A plain C++ program (g++, no nvcc) built against fusor as a user would: it
// assigns fused expressions on the host executor and checks every value. Exits
// non-zero when a value is wrong.
#include <cmath>
#include <cstdio>

#include <fusor/fusor.hpp>

int main() {
  using matrix = fusor::dextents<fusor::index_t, 2>;
  using row = fusor::dextents<fusor::index_t, 1>;
  const fusor::index_t rows = 512, cols = 256;  // large enough for the parallel host path
  fusor::tensor<float, matrix> x(rows, cols), y(rows, cols), z(rows, cols);
  fusor::tensor<float, row> b(cols);
  for (fusor::index_t i = 0; i < x.size(); ++i) x.data()[i] = float(i % 97) / 16.0f - 3.0f;
  for (fusor::index_t j = 0; j < cols; ++j) b(j) = float(j % 7) - 3.0f;

  // One pass: y = relu(2x + b) with b broadcast over the rows.
  fusor::assign(y, fusor::relu(x * 2 + b));
  // One pass, two outputs: z = x * x, and y updated in place from its old value.
  fusor::assign_many(fusor::host_executor{}, fusor::out(z, x * x), fusor::out(y, y - 1));

  int wrong = 0;
  for (fusor::index_t i = 0; i < rows; ++i)
    for (fusor::index_t j = 0; j < cols; ++j) {
      const float xv = float((i * cols + j) % 97) / 16.0f - 3.0f;
      const float want_y = std::fmax(2 * xv + float(j % 7) - 3.0f, 0.0f) - 1;
      if (std::fabs(y(i, j) - want_y) > 1e-5f || std::fabs(z(i, j) - xv * xv) > 1e-5f) ++wrong;
    }
  std::printf("fusor consumer (C++): %s, %d wrong of %lld\n", wrong ? "FAILED" : "OK", wrong,
              (long long)x.size());
  return wrong ? 1 : 0;
}
