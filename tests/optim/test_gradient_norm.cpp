// The gradient norm's sum of squares (optim/gradient_norm.hpp): each call adds
// the squares of one buffer (fp32, bf16, fp16) to an fp64 total, against an
// fp64 reference on random values, for sizes from one element to more blocks
// than the workspace holds, 16-byte aligned and not. The kernel's body runs
// on the GPU in the CUDA binary and under the SIMT emulator in the host
// binary, on an emulated GPU whose workspace holds few blocks, so that the
// grid strides and the last block to arrive adds the others' partial sums;
// the arrival counter is zero again after every call (the next call's, or a
// graph replay's, count starts over), and a second call gives the same bits.
#include <cstring>
#include <vector>

#include <fusor/optim/gradient_norm.hpp>

#include "optim/optim_support.hpp"

#if !defined(FUSOR_TEST_CUDA)
#include <fusor/kernels/simt_emulator.hpp>
#endif

using namespace optim_test;

namespace {

// Sizes: one element, a partial vector, one block's share, several blocks,
// and more work than the grid has blocks (on the GPU, 2^23 fp32 elements:
// 2,048 blocks' share, at most 8 blocks a multiprocessor).
const index_t sizes[] = {1, 7, 4099, 65536 + 3, index_t(1) << 23};

template <class P>
double reference(const flat_host<P>& h, index_t offset, index_t n) {
  double s = 0.0;
  for (index_t i = 0; i < n; ++i) {
    const double x = convert<double>(h.data()[offset + i]);
    s += x * x;
  }
  return s;
}

#if defined(FUSOR_TEST_CUDA)
// total (starting at `start`) after add_sum_of_squares of g[offset, offset + n), twice over: the two
// totals and the workspace's arrival counter after them.
struct two_sums {
  double first, second;
  unsigned int arrivals;
};
template <class P>
two_sums sum_twice(const flat_space<P>& g, index_t offset, index_t n, double start) {
  executor ex{};
  optim::gradient_norm_workspace<space> workspace(ex.stream);
  flat_space<double> total(2);
  const double starts[2] = {start, start};
  FUSOR_CUDA_CHECK(cudaMemcpy(total.data(), starts, sizeof(starts), cudaMemcpyHostToDevice));
  const optim::flat_view<P, space> part(g.data() + offset, n);
  optim::add_sum_of_squares(total.data(), part, workspace, ex);
  optim::add_sum_of_squares(total.data() + 1, part, workspace, ex);
  ex.synchronize();
  two_sums out{};
  double totals[2];
  FUSOR_CUDA_CHECK(cudaMemcpy(totals, total.data(), sizeof(totals), cudaMemcpyDeviceToHost));
  FUSOR_CUDA_CHECK(cudaMemcpy(&out.arrivals, workspace.arrivals(), sizeof(unsigned int), cudaMemcpyDeviceToHost));
  out.first = totals[0];
  out.second = totals[1];
  return out;
}
#else
namespace fd = fusor::detail;
namespace od = fusor::optim::detail;

// The emulated GPU's workspace: partial sums for 6 blocks (a real one has 8 a multiprocessor).
inline constexpr int emulated_capacity = 6;

struct two_sums {
  double first, second;
  unsigned int arrivals;
  index_t blocks;
};
// As the CUDA launch does it, with the kernel body under the emulator; the partial sums start poisoned.
template <class P>
two_sums sum_twice(const flat_host<P>& g, index_t offset, index_t n, double start) {
  const P* data = g.data() + offset;
  const od::sum_of_squares_launch launch = od::plan_sum_of_squares(data, n, emulated_capacity);
  std::vector<double> partial(emulated_capacity);
  std::memset(static_cast<void*>(partial.data()), 0xff, partial.size() * sizeof(double));
  unsigned int arrivals = 0;
  double totals[2] = {start, start};
  for (double& total : totals) {
    const od::sum_of_squares_job<P> job{data, n, &total, partial.data(), &arrivals};
    fd::emulate_kernel(fd::simt_grid{launch.blocks, 1}, od::norm_block_threads, 0, [&](unsigned char*) {
      if (launch.vectorized) od::add_sum_of_squares_block<fd::emulated_simt, od::norm_lanes<P>>(job);
      else od::add_sum_of_squares_block<fd::emulated_simt, 1>(job);
    });
  }
  return {totals[0], totals[1], arrivals, launch.blocks};
}
#endif

template <class P>
void check_sums(std::uint32_t seed) {
  for (const index_t n : sizes) {
#if !defined(FUSOR_TEST_CUDA)
    if (n > 65536 + 3) continue;  // the emulator runs a block's 256 threads as fibers: keep it quick
#endif
    for (const index_t offset : {index_t(0), index_t(1)}) {  // 16-byte aligned, then not
      CAPTURE(n);
      CAPTURE(offset);
      const auto host = random_flat<P>(n + offset, seed + std::uint32_t(n), -3.0, 3.0);
      const double start = 0.625;  // the total already holds earlier buffers' squares
      const double want = start + reference(host, offset, n);
#if defined(FUSOR_TEST_CUDA)
      const two_sums got = sum_twice(to_space(host), offset, n, start);
#else
      const two_sums got = sum_twice(host, offset, n, start);
      if (n >= 65536) CHECK(got.blocks == emulated_capacity);  // every partial sum slot in use
#endif
      CHECK(std::abs(got.first - want) <= 1e-12 * want);
      CHECK(std::memcmp(&got.first, &got.second, sizeof(double)) == 0);  // bit-for-bit the same
      CHECK(got.arrivals == 0u);
    }
  }
}

}  // namespace

FUSOR_TEST_CASE("gradient norm: the sum of squares of fp32 gradients, added to the total") { check_sums<float>(11); }
FUSOR_TEST_CASE("gradient norm: the sum of squares of bf16 gradients, added to the total") {
  check_sums<bfloat16>(12);
}
FUSOR_TEST_CASE("gradient norm: the sum of squares of fp16 gradients, added to the total") {
  check_sums<float16>(13);
}

FUSOR_TEST_CASE("gradient norm: Inf and NaN gradients make the total Inf and NaN") {
  for (const double bad : {double(INFINITY), double(NAN)}) {
    auto host = random_flat<float>(4099, 14);
    host.data()[2049] = float(bad);
#if defined(FUSOR_TEST_CUDA)
    const two_sums got = sum_twice(to_space(host), 0, 4099, 0.0);
#else
    const two_sums got = sum_twice(host, 0, 4099, 0.0);
#endif
    if (std::isnan(bad)) CHECK(std::isnan(got.first));
    else CHECK(got.first == double(INFINITY));
    CHECK(got.arrivals == 0u);
  }
}
