// examples/quickstart.cu — fusor in one page, on the GPU.
//
// The same program as quickstart.cpp, compiled by nvcc:
//
//     y = gelu(x * w + b)        (b, one row, broadcast over every row of x)
//
// is ONE kernel launch on a CUDA GPU (fusor::cuda_executor, device tensors).
// Without a GPU it says so and runs the same expression on the host executor
// instead. Either way every element is checked against a plain loop in double
// precision, and the program exits non-zero if a value is wrong.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>

#include <fusor/core/copy.hpp>          // fusor::copy between host and device
#include <fusor/core/cuda_runtime.hpp>  // fusor::gpu::available, launch_count
#include <fusor/core/tensor.hpp>        // fusor::tensor, fusor::extents, memory spaces
#include <fusor/exec/assign.hpp>        // fusor::assign
#include <fusor/exec/cuda.hpp>          // fusor::cuda_executor
#include <fusor/expr/operators.hpp>     // + - * /, gelu, exp, where, ...

using matrix = fusor::dextents<fusor::index_t, 2>;
using row = fusor::dextents<fusor::index_t, 1>;
template <class Extents, class Space = fusor::host_space>
using float_tensor = fusor::tensor<float, Extents, fusor::row_major, Space>;

int main() {
  const fusor::index_t rows = 1000, cols = 64;
  float_tensor<matrix> x(rows, cols), w(rows, cols), y(rows, cols);
  float_tensor<row> b(cols);  // a bias row

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  auto fill = [&](auto& t) { for (fusor::index_t i = 0; i < t.size(); ++i) t.data()[i] = uniform(rng); };
  fill(x), fill(w), fill(b);

  const bool gpu = fusor::gpu::available();
  std::uint64_t launches = 0;
  if (gpu) {
    // Device copies of the inputs, one kernel for the whole expression, and the result back.
    float_tensor<matrix, fusor::device_space> dx(x.extents()), dw(w.extents()), dy(y.extents());
    float_tensor<row, fusor::device_space> db(b.extents());
    fusor::copy(dx, x), fusor::copy(dw, w), fusor::copy(db, b);
    const fusor::cuda_executor gpu_executor{};  // the default stream, launch shape from the occupancy API
    const std::uint64_t before = fusor::gpu::launch_count();
    fusor::assign(dy, fusor::gelu(dx * dw + db), gpu_executor);
    gpu_executor.synchronize();
    launches = fusor::gpu::launch_count() - before;
    fusor::copy(y, dy);
  } else {
    std::printf("fusor quickstart (CUDA build): no CUDA GPU is present on this machine;\n"
                "  running the same expression on the host executor instead.\n");
    fusor::assign(y, fusor::gelu(x * w + b));  // fusor::host_executor
  }

  // The same thing as a plain loop, in double precision.
  double worst = 0;
  for (fusor::index_t i = 0; i < rows; ++i)
    for (fusor::index_t j = 0; j < cols; ++j) {
      const double v = double(x(i, j)) * double(w(i, j)) + double(b(j));
      const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      worst = std::fmax(worst, std::fabs(double(y(i, j)) - want) / std::fmax(1.0, std::fabs(want)));
    }

  std::printf("fusor quickstart: y = gelu(x * w + b) on the %s executor\n", gpu ? "cuda" : "host");
  std::printf("  x, w, y: [%lld, %lld] float;  b: [%lld] float, broadcast over the rows\n",
              (long long)rows, (long long)cols, (long long)cols);
  if (gpu)
    std::printf("  one fused pass: %llu kernel launch(es), no temporaries for x * w or x * w + b\n",
                (unsigned long long)launches);
  else
    std::printf("  one fused pass: no temporaries for x * w or x * w + b\n");
  for (fusor::index_t i : {fusor::index_t(0), rows / 2, rows - 1})
    std::printf("  y(%lld, 3) = % .6f   (x = % .4f, w = % .4f, b = % .4f)\n", (long long)i, y(i, 3), x(i, 3),
                w(i, 3), b(3));
  const bool ok = worst <= 1e-5 && (!gpu || launches == 1);
  std::printf("  largest relative error against a plain double loop: %.2e -> %s\n", worst, ok ? "OK" : "WRONG");
  return ok ? 0 : 1;
}
