// A CUDA program (nvcc) built against fusor as a user would: one fused kernel
// on the GPU where there is one, the host executor otherwise; every value is
// checked. Exits non-zero when a value is wrong.
#include <cmath>
#include <cstdio>

#include <fusor/fusor.hpp>

int main() {
  using matrix = fusor::dextents<fusor::index_t, 2>;
  using row = fusor::dextents<fusor::index_t, 1>;
  const fusor::index_t rows = 512, cols = 256;
  fusor::tensor<float, matrix> x(rows, cols), y(rows, cols);
  fusor::tensor<float, row> b(cols);
  for (fusor::index_t i = 0; i < x.size(); ++i) x.data()[i] = float(i % 97) / 16.0f - 3.0f;
  for (fusor::index_t j = 0; j < cols; ++j) b(j) = float(j % 7) - 3.0f;

  const bool gpu = fusor::gpu::available();
  if (gpu) {
    fusor::tensor<float, matrix, fusor::row_major, fusor::device_space> dx(x.extents()), dy(y.extents());
    fusor::tensor<float, row, fusor::row_major, fusor::device_space> db(b.extents());
    fusor::copy(dx, x);
    fusor::copy(db, b);
    const fusor::cuda_executor executor{};
    fusor::assign(dy, fusor::relu(dx * 2 + db), executor);
    executor.synchronize();
    fusor::copy(y, dy);
  } else {
    fusor::assign(y, fusor::relu(x * 2 + b));
  }

  int wrong = 0;
  for (fusor::index_t i = 0; i < rows; ++i)
    for (fusor::index_t j = 0; j < cols; ++j) {
      const float xv = float((i * cols + j) % 97) / 16.0f - 3.0f;
      if (std::fabs(y(i, j) - std::fmax(2 * xv + float(j % 7) - 3.0f, 0.0f)) > 1e-5f) ++wrong;
    }
  std::printf("fusor consumer (CUDA, %s executor): %s, %d wrong of %lld\n", gpu ? "cuda" : "host",
              wrong ? "FAILED" : "OK", wrong, (long long)x.size());
  return wrong ? 1 : 0;
}
