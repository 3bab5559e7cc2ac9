// Tensors of 2^31 + 7 elements on the GPU (issue 12): every index past 2^31
// must be computed in 64 bits. Checked: the cuda executor's linear kernel
// (and its scalar tail) and strided kernel, whole-tensor reductions (a count of
// 2^31 + 7 trues, an argmax past 2^31), a sum along rows, layernorm forward and
// backward and softmax over rows of 131 (a prime) elements. Inputs are random
// (a counter-based draw on the device, seed fixed), read back for the rows and
// elements checked; references in double on the host, for sampled rows (the
// first, those around element 2^31, the last, and random ones) and for the
// parameter gradients over every row. Outputs are poisoned with NaN first.
//
// Each test needs up to 25 GiB of GPU memory and says "skipped: needs N GiB"
// where that is not free. Test suite "large" (doctest -ts=large / -tse=large),
// ctest label "large".
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fusor/kernels/layernorm.hpp>
#include <fusor/kernels/reduce.hpp>
#include <fusor/kernels/softmax.hpp>
#include <fusor/nn/random.hpp>

#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {

using vector_extents = extents<index_t, dynamic>;
using matrix_extents = extents<index_t, dynamic, dynamic>;
using device_matrix = view<float, matrix_extents, row_major, device_space>;

constexpr index_t elements = (index_t(1) << 31) + 7;
constexpr index_t columns = 131;  // 2^31 + 7 = 131 * 16393005
constexpr index_t rows = elements / columns;
static_assert(rows * columns == elements);
constexpr double gib = double(index_t(1) << 30);

// Whether `bytes` of GPU memory are free (after the pool has given back what
// it keeps); if not, a visible skip message, not a silent pass.
bool device_memory_for(const char* test, index_t bytes) {
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  int device = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool{};
  FUSOR_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  FUSOR_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  std::size_t free_bytes = 0, total_bytes = 0;
  FUSOR_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const index_t margin = index_t(1) << 30;
  if (index_t(free_bytes) >= bytes + margin) return true;
  MESSAGE("skipped: ", test, " needs ", std::ceil(double(bytes + margin) / gib), " GiB of free GPU memory; ",
          double(free_bytes) / gib, " GiB are free");
  return false;
}

__global__ void fill_uniform_kernel(float* x, index_t n, std::uint64_t seed) {
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += index_t(gridDim.x) * blockDim.x)
    x[i] = fusor::nn::random_uniform(seed, std::uint64_t(i)) * 4.0f - 2.0f;  // [-2, 2)
}
// x[i] in [-2, 2), from the seed, on the GPU (no 8 GiB host copy).
void fill_uniform(float* x, index_t n, std::uint64_t seed) {
  fill_uniform_kernel<<<4096, 256>>>(x, n, seed);
  FUSOR_CUDA_CHECK(cudaGetLastError());
}
void poison_device(float* x, index_t n) { FUSOR_CUDA_CHECK(cudaMemset(x, 0xFF, std::size_t(n) * sizeof(float))); }

std::vector<float> read(const float* device, index_t first, index_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  FUSOR_CUDA_CHECK(cudaMemcpy(out.data(), device + first, std::size_t(count) * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}
void write(float* device, index_t at, float value) {
  FUSOR_CUDA_CHECK(cudaMemcpy(device + at, &value, sizeof(float), cudaMemcpyHostToDevice));
}

// Elements checked: a window across 2^31 that ends at the last element (so the
// linear kernel's tail, size % 4 = 3 elements, is in it), the first ones, and random ones.
std::vector<index_t> sampled_elements() {
  std::vector<index_t> out;
  for (index_t i = 0; i < 8; ++i) out.push_back(i);
  for (index_t i = (index_t(1) << 31) - 40; i < elements; ++i) out.push_back(i);
  std::mt19937_64 rng(12);
  for (int k = 0; k < 64; ++k) out.push_back(index_t(rng() % std::uint64_t(elements)));
  return out;
}

// Rows checked: the first, the row holding elements 2^31 - 1 and 2^31 and
// the rows before it (it is the last row or next to it), the last, and random ones.
std::vector<index_t> sampled_rows() {
  const index_t boundary = (index_t(1) << 31) / columns;
  static_assert((index_t(1) << 31) / columns < rows && (index_t(1) << 31) / columns >= rows - 3,
                "the boundary row is among the last rows checked");
  std::vector<index_t> out = {0, 1, 2, boundary - 2, boundary - 1, boundary, rows - 3, rows - 2, rows - 1};
  std::mt19937_64 rng(13);
  for (int k = 0; k < 32; ++k) out.push_back(index_t(rng() % std::uint64_t(rows)));
  return out;
}

// |got - want| within tol of the magnitude `scale` of the terms `want` is made of.
bool near(double got, double want, double scale, double tol) {
  return std::isfinite(got) && std::fabs(got - want) <= tol * std::max(1.0, scale);
}

}  // namespace

TEST_SUITE("large") {

FUSOR_TEST_CASE("2^31 + 7 elements: linear and strided assignment, counts and argmax past 2^31") {
  if (!device_memory_for("this test", 2 * elements * index_t(sizeof(float)))) return;
  space_tensor<float, vector_extents> x(elements), y(elements);
  fill_uniform(x.data(), elements, 21);
  const index_t peak = elements - 2;  // past 2^31, in the linear kernel's tail
  write(x.data(), peak, 3.0f);
  executor ex{};

  // Linear kernel, 16-byte steps and the scalar tail.
  poison_device(y.data(), elements);
  assign(y, x * 2.5 + 1, ex);
  finish(ex);
  {
    int wrong = 0;
    for (const index_t i : sampled_elements()) {
      const double xi = read(x.data(), i, 1)[0], got = read(y.data(), i, 1)[0];
      const double want = xi * 2.5 + 1;
      if (!near(got, want, std::fabs(xi * 2.5) + 1, 1e-6) && wrong++ < 5)
        FAIL_CHECK("linear: y[", i, "] = ", got, ", want ", want);
    }
    CHECK(wrong == 0);
  }

  // Strided kernel: a [rows, 1] column plus a [columns] row broadcast to [rows, columns].
  host_tensor<float, matrix_extents> hcolumn(rows, 1);
  host_tensor<float, vector_extents> hrow(columns);
  fill_random(hcolumn, 22), fill_random(hrow, 23);
  const auto column = to_space(hcolumn);
  const auto row = to_space(hrow);
  const device_matrix y2(y.data(), rows, columns);
  poison_device(y.data(), elements);
  assign(y2, column + row, ex);
  finish(ex);
  {
    int wrong = 0;
    for (const index_t i : sampled_elements()) {
      const index_t r = i / columns, c = i % columns;
      const double want = double(hcolumn(r, 0)) + double(hrow(c)), got = read(y.data(), i, 1)[0];
      if (!near(got, want, std::fabs(double(hcolumn(r, 0))) + std::fabs(double(hrow(c))), 1e-6) && wrong++ < 5)
        FAIL_CHECK("strided: y[", r, ", ", c, "] = ", got, ", want ", want);
    }
    CHECK(wrong == 0);
  }

  // Whole-tensor reductions: 2^31 + 7 trues (an int count would wrap), and
  // the maximum's index past 2^31.
  CHECK(fusor::sum(x >= -2.0, ex) == elements);
  CHECK(fusor::argmax(x, ex) == peak);
  CHECK(fusor::amax(x, ex) == 3.0f);
}

FUSOR_TEST_CASE("2^31 + 7 elements in rows of 131: row sums, layernorm forward and backward, softmax") {
  if (!device_memory_for("this test", 3 * elements * index_t(sizeof(float)) + 4 * rows * index_t(sizeof(float))))
    return;
  space_tensor<float, matrix_extents> x(rows, columns), y(rows, columns), dx(rows, columns);
  space_tensor<float, vector_extents> mean(rows), rstd(rows), row_sums(rows);
  host_tensor<float, vector_extents> hw(columns), hb(columns);
  fill_random(hw, 31, 0.5, 1.5), fill_random(hb, 32, -1.0, 1.0);
  const auto w = to_space(hw);
  const auto b = to_space(hb);
  space_tensor<float, vector_extents> dw(columns), db(columns);
  fill_uniform(x.data(), elements, 33);
  const std::vector<index_t> checked = sampled_rows();
  constexpr float epsilon = 1e-5f;
  executor ex{};
  auto row_of = [](const space_tensor<float, matrix_extents>& t, index_t r) {
    return read(t.data(), r * columns, columns);
  };

  // Sum along each row (a warp per row, rows past 2^31 / 131).
  poison_device(row_sums.data(), rows);
  fusor::sum(row_sums, x, 1, ex);
  finish(ex);
  for (const index_t r : checked) {
    const std::vector<float> xr = row_of(x, r);
    double want = 0, magnitude = 0;
    for (const float v : xr) want += v, magnitude += std::fabs(v);
    const double got = read(row_sums.data(), r, 1)[0];
    CHECK_MESSAGE(near(got, want, magnitude, 1e-6), "row ", r, ": sum ", got, ", want ", want);
  }

  // Layernorm forward.
  poison_device(y.data(), elements), poison_device(mean.data(), rows), poison_device(rstd.data(), rows);
  layernorm(y, mean, rstd, x, w, b, {epsilon}, ex);
  finish(ex);
  struct statistics {
    double mean, rstd;
  };
  auto row_statistics = [&](const float* xr) {
    double m = 0, squares = 0;
    for (index_t j = 0; j < columns; ++j) m += xr[j];
    m /= double(columns);
    for (index_t j = 0; j < columns; ++j) squares += (xr[j] - m) * (xr[j] - m);
    return statistics{m, 1 / std::sqrt(squares / double(columns) + double(epsilon))};
  };
  for (const index_t r : checked) {
    const std::vector<float> xr = row_of(x, r), yr = row_of(y, r);
    const statistics s = row_statistics(xr.data());
    CHECK_MESSAGE(near(read(mean.data(), r, 1)[0], s.mean, 2.0, 1e-6), "row ", r, ": mean");
    CHECK_MESSAGE(near(read(rstd.data(), r, 1)[0], s.rstd, s.rstd, 1e-5), "row ", r, ": rstd");
    int wrong = 0;
    for (index_t j = 0; j < columns; ++j) {
      const double xhat = (xr[std::size_t(j)] - s.mean) * s.rstd;
      const double want = xhat * hw(j) + hb(j);
      if (!near(yr[std::size_t(j)], want, std::fabs(xhat * hw(j)) + std::fabs(hb(j)), 3e-5)) ++wrong;
    }
    CHECK_MESSAGE(wrong == 0, "row ", r, ": ", wrong, " outputs of layernorm differ");
  }

  // Layernorm backward with dy = y: dx of the sampled rows, dweight and dbias over every row.
  poison_device(dx.data(), elements), poison_device(dw.data(), columns), poison_device(db.data(), columns);
  layernorm_backward(dx, dw, db, y, x, w, mean, rstd, ex);
  finish(ex);
  for (const index_t r : checked) {
    const std::vector<float> xr = row_of(x, r), dyr = row_of(y, r), dxr = row_of(dx, r);
    const statistics s = row_statistics(xr.data());
    double mean_g = 0, mean_gx = 0;
    for (index_t j = 0; j < columns; ++j) {
      const double g = dyr[std::size_t(j)] * double(hw(j)), xhat = (xr[std::size_t(j)] - s.mean) * s.rstd;
      mean_g += g / double(columns);
      mean_gx += g * xhat / double(columns);
    }
    int wrong = 0;
    for (index_t j = 0; j < columns; ++j) {
      const double g = dyr[std::size_t(j)] * double(hw(j)), xhat = (xr[std::size_t(j)] - s.mean) * s.rstd;
      const double want = s.rstd * (g - mean_g - xhat * mean_gx);
      const double scale = s.rstd * (std::fabs(g) + std::fabs(mean_g) + std::fabs(xhat * mean_gx));
      if (!near(dxr[std::size_t(j)], want, scale, 1e-4)) ++wrong;
    }
    CHECK_MESSAGE(wrong == 0, "row ", r, ": ", wrong, " elements of dx differ");
  }
  {
    // Every row, on the host: 16 GiB read back.
    const std::vector<float> hx = read(x.data(), 0, elements), hy = read(y.data(), 0, elements);
    std::vector<double> want_dw(columns), want_db(columns), magnitude(columns);
    for (index_t r = 0; r < rows; ++r) {
      const float* xr = hx.data() + r * columns;
      const float* dyr = hy.data() + r * columns;
      const statistics s = row_statistics(xr);
      for (index_t j = 0; j < columns; ++j) {
        const double term = dyr[j] * ((xr[j] - s.mean) * s.rstd);
        want_dw[std::size_t(j)] += term;
        want_db[std::size_t(j)] += dyr[j];
        magnitude[std::size_t(j)] += std::fabs(term) + std::fabs(dyr[j]);
      }
    }
    const std::vector<float> got_dw = read(dw.data(), 0, columns), got_db = read(db.data(), 0, columns);
    for (index_t j = 0; j < columns; ++j) {
      CHECK_MESSAGE(near(got_dw[std::size_t(j)], want_dw[std::size_t(j)], magnitude[std::size_t(j)], 1e-4),
                    "dweight[", j, "] = ", got_dw[std::size_t(j)], ", want ", want_dw[std::size_t(j)]);
      CHECK_MESSAGE(near(got_db[std::size_t(j)], want_db[std::size_t(j)], magnitude[std::size_t(j)], 1e-4),
                    "dbias[", j, "] = ", got_db[std::size_t(j)], ", want ", want_db[std::size_t(j)]);
    }
  }

  // Softmax of x into dx.
  poison_device(dx.data(), elements);
  softmax(dx, x, ex);
  finish(ex);
  for (const index_t r : checked) {
    const std::vector<float> xr = row_of(x, r), yr = row_of(dx, r);
    const double m = *std::max_element(xr.begin(), xr.end());
    double total = 0;
    for (const float v : xr) total += std::exp(v - m);
    int wrong = 0;
    for (index_t j = 0; j < columns; ++j) {
      const double want = std::exp(xr[std::size_t(j)] - m) / total;
      if (!near(yr[std::size_t(j)], want, 0.0, 1e-6)) ++wrong;
    }
    CHECK_MESSAGE(wrong == 0, "row ", r, ": ", wrong, " outputs of softmax differ");
  }
}

}  // TEST_SUITE("large")
