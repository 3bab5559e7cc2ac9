// tests/kernels/rowwise_support.hpp — what the row-wise kernel tests share:
// the row lengths every kernel is checked at, random inputs in a precision,
// fp64 copies of results, per-precision tolerances and an element checker that
// reports the first mismatch.
//
// Tolerances are relative to the magnitude of the terms a result is made of
// (so cancellation is judged fairly): one rounding into the output's precision
// (bf16 2^-8, fp16 2^-11 relative) with a margin, or a few fp32 ulps. A result
// that uses a row sum S is also allowed what fp32 loses on S (a few ulps of the
// sum of the terms' magnitudes) times the factor S is used with, and results
// below fp16's normal range are allowed its subnormal spacing.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "support/fusor_test.hpp"

#if !FUSOR_HAS_CUDA
#include <fusor/kernels/row_reduce.hpp>
#endif

namespace rowwise_test {

using namespace fusor_test;
using matrix_extents = extents<index_t, dynamic, dynamic>;
using vector_extents = extents<index_t, dynamic>;

struct row_shape {
  index_t rows;
  index_t length;
};

// Every length the issue names (1, 3, 31, 32, 33, 1000, 4097, 200003) and the
// GPU's boundaries: a warp's register capacity (1024 elements at 32 bits, 2048
// at 16), a block's (16384 / 32768; half that for two cached rows), past which
// rows go to clusters of 512-thread blocks (sm_90: 32769 is three blocks,
// GPT-2's vocabulary 50304 four, 131072 the most a portable cluster of eight
// holds, 200003 thirteen; two cached rows: 16385 three blocks, 50304 seven,
// 131072 sixteen, 200003 read twice), and 300007, read twice.
inline std::vector<row_shape> row_shapes() {
  return {{37, 1},   {37, 3},   {37, 31},   {37, 32},   {37, 33},   {19, 1000},  {7, 1025},   {7, 2049},
          {5, 4097}, {3, 8193}, {3, 16385}, {2, 32769}, {2, 50304}, {2, 131072}, {2, 200003}, {2, 300007}};
}

// Calls f(std::type_identity<P>{}) for fp32, bf16 and fp16 storage.
template <class F>
void for_each_precision(F&& f) {
  f(std::type_identity<float>{});
  f(std::type_identity<bfloat16>{});
  f(std::type_identity<float16>{});
}

template <class P>
const char* precision_name() {
  if constexpr (std::is_same_v<P, bfloat16>) return "bf16";
  else if constexpr (std::is_same_v<P, float16>) return "fp16";
  else if constexpr (std::is_same_v<P, double>) return "fp64";
  else return "fp32";
}

// Relative tolerance of a row-wise result stored in P.
template <class P>
constexpr double row_tolerance() {
  if constexpr (std::is_same_v<P, bfloat16>) return 1e-2;
  else if constexpr (std::is_same_v<P, float16>) return 1.5e-3;
  else if constexpr (std::is_same_v<P, float>) return 3e-5;
  else return 1e-11;
}
// What a sum of n terms computed with fp32 statistics (fp64 for fp64) may lose,
// relative to the sum of the terms' magnitudes: a few ulps of fp32.
template <class P>
constexpr double statistics_epsilon() {
  if constexpr (std::is_same_v<P, double>) return 1e-15;
  else return 2.5e-7;
}
// Absolute floor: below it a result is a subnormal of P (fp16: 2^-24 spacing).
template <class P>
constexpr double row_floor() {
  if constexpr (std::is_same_v<P, float16>) return 1.2e-7;
  else return 1e-30;
}

// A host tensor of shape [rows, length] in P with uniform values in [low, high).
template <class P>
host_tensor<P, matrix_extents> random_matrix(index_t rows, index_t length, std::uint32_t seed, double low,
                                             double high) {
  host_tensor<P, matrix_extents> t(rows, length);
  fill_random(t, seed, low, high);
  return t;
}
template <class P>
host_tensor<P, vector_extents> random_vector(index_t length, std::uint32_t seed, double low, double high) {
  host_tensor<P, vector_extents> t(length);
  fill_random(t, seed, low, high);
  return t;
}

// A flat host buffer holding `h`'s elements `offset` elements in (those before
// left unset): the memory behind views whose rows start off a 16-byte boundary.
template <class T>
host_tensor<T, vector_extents> offset_in_memory(const host_tensor<T, matrix_extents>& h, index_t offset) {
  host_tensor<T, vector_extents> flat(h.size() + offset);
  for (index_t i = 0; i < h.size(); ++i) flat(i + offset) = h.data()[i];
  return flat;
}

// The elements of a poisoned buffer that held a view `head` elements in,
// with `tail` elements after it: checks that those outside the view are
// still NaN (nothing written before or after it) and returns the view's.
inline std::vector<double> inside_guards(std::vector<double> all, std::size_t head, std::size_t tail) {
  for (std::size_t i = 0; i < head; ++i) CHECK_MESSAGE(std::isnan(all[i]), "written before the view: ", i);
  for (std::size_t i = all.size() - tail; i < all.size(); ++i)
    CHECK_MESSAGE(std::isnan(all[i]), "written after the view: ", i);
  all.erase(all.end() - std::ptrdiff_t(tail), all.end());
  all.erase(all.begin(), all.begin() + std::ptrdiff_t(head));
  return all;
}
// Elements left after a view in a guarded buffer.
inline constexpr index_t guard_elements = 16;

// Rows the emulated kernels have cached through a window off a 16-byte
// boundary so far (row_reduce.hpp shifted_window_rows; host builds, -1 in
// CUDA builds, where the kernels run on the GPU).
inline long shifted_window_rows_so_far() {
#if FUSOR_HAS_CUDA
  return -1;
#else
  return fusor::detail::shifted_window_rows().load();
#endif
}

// Counts elements outside |got - want| <= tol * scale + floor and reports the
// first; NaN must meet NaN and an infinity the same infinity.
class checker {
 public:
  explicit checker(std::string what) : what_(std::move(what)) {}
  bool operator()(double got, double want, double scale, double tol, double floor, index_t row, index_t column) {
    bool ok;
    if (std::isnan(want)) ok = std::isnan(got);
    else if (std::isinf(want)) ok = got == want;
    else {
      const double allowed = tol * scale + floor;
      ok = std::fabs(got - want) <= allowed;
      if (allowed > 0 && std::fabs(got - want) / allowed > worst_) worst_ = std::fabs(got - want) / allowed;
    }
    if (!ok && failures_++ == 0) {
      std::ostringstream s;
      s.precision(10);
      s << what_ << ": row " << row << ", column " << column << ": got " << got << ", want " << want
        << " (tolerance " << tol * scale + floor << ")";
      first_ = s.str();
    }
    ++checked_;
    return ok;
  }
  void finish() const {
    if (std::getenv("FUSOR_ROWWISE_WORST")) std::printf("%-60s worst error / tolerance %.3f\n", what_.c_str(), worst_);
    INFO(what_, ": ", failures_, " of ", checked_, " elements wrong; first: ", first_);
    CHECK(failures_ == 0);
  }

 private:
  std::string what_;
  std::string first_;
  index_t failures_ = 0;
  index_t checked_ = 0;
  double worst_ = 0;
};

inline std::uint64_t launches() { return fusor::gpu::launch_count(); }
#if defined(FUSOR_TEST_CUDA)
inline constexpr bool counts_launches = true;
#else
inline constexpr bool counts_launches = false;  // the host executor launches nothing
#endif

// Rows the staged kernels take (kernels/row_reduce.hpp, staged_row): 16-bit,
// whole 16-byte items, more rows than one wave of groups holds. Under the
// SIMT emulator (a wave of two blocks or clusters): warps (eight rows a
// block), a 128-thread block, a cluster of four 512-thread blocks.
inline std::vector<row_shape> staged_emulated_shapes() { return {{40, 256}, {9, 4096}, {5, 50304}}; }
#if defined(FUSOR_TEST_CUDA)
// The current GPU's compute capability, major part.
inline int gpu_compute_major() {
  int device = 0, major = 0;
  FUSOR_CUDA_CHECK(cudaGetDevice(&device));
  FUSOR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}
// On an H100/H200, past a wave of warps (4 blocks of 8 a multiprocessor:
// 4,224 rows), of 128-thread blocks (8: 1,056) and of clusters' blocks (2:
// 264); the cluster's rows only where clusters run (sm_90 and later:
// elsewhere 512-thread blocks read them twice, unstaged).
inline std::vector<row_shape> staged_gpu_shapes() {
  std::vector<row_shape> shapes{{5000, 1000}, {1500, 4096}};
  if (gpu_compute_major() >= 9) shapes.push_back({300, 50304});
  return shapes;
}
// Whether this GPU runs the staged kernels (cp.async: sm_80 and later).
inline bool gpu_stages_rows() { return gpu_compute_major() >= 8; }
#endif

}  // namespace rowwise_test
