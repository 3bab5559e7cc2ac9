// One warp's mma.m16n8k16 and ldmatrix, written once against a Simt policy
// (kernels/warp_mma.hpp): the host test runs it under the SIMT emulator, the
// CUDA test with the GPU's own instructions (device_simt). Both check the
// same things, so a GPU that disagrees with the emulator shows here, in one
// product, before it shows as a wrong attention output:
// - D = A B + 0.5 from fragments built by the PTX ISA's formula (which lane
//   holds which element), A 16 x 16, B 16 x 8;
// - the same product with A and B^T loaded from shared memory by ldmatrix,
//   and B by ldmatrix.trans: each register must equal the formula's.
// A and B are small multiples of 1/4, so every product and sum is exact.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fusor/kernels/warp_mma.hpp>

namespace warp_mma_probe {

// Shared memory: A row-major (16 x 16), B stored as its transpose (8 rows of
// 16: a K tile's layout) and as itself (16 rows of 8: a V tile's), 16-byte rows.
inline constexpr int a_ld = 24, bt_ld = 24, b_ld = 8;
template <class T>
inline constexpr std::size_t shared_bytes = std::size_t(16 * a_ld + 8 * bt_ld + 16 * b_ld) * sizeof(T);

struct results {
  float by_formula[16 * 8];
  float by_ldmatrix[16 * 8];
  // Per lane: bit i set where ldmatrix's register differs from the formula's
  // (bits 0-3: A; 4-5: B^T plain; 6-7: B transposed).
  std::uint32_t fragment_mismatches[32];
};

// A (16 x 16, row-major) and B (16 x 8, row-major) as floats exact in bf16 and fp16.
inline std::vector<float> random_exact_matrix(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<float> m(n);
  for (float& x : m) x = float(dist(rng)) / 4.0f;
  return m;
}

// One warp (32 threads) with shared_bytes<T> of shared memory; `out` is
// written by every lane (its elements of D and its mismatch bits).
template <class Simt, class T>
FUSOR_DEVICE void run(const float* a, const float* b, unsigned char* shared, results& out) {
  namespace fd = fusor::detail;
  const int lane = Simt::thread(), g = lane / 4, q = lane % 4;
  T* const as = reinterpret_cast<T*>(shared);
  T* const bts = as + 16 * a_ld;
  T* const bs = bts + 8 * bt_ld;
  if (lane == 0) {
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 16; ++k) Simt::store_shared(as + m * a_ld + k, fusor::convert<T>(a[m * 16 + k]));
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < 8; ++n) {
        Simt::store_shared(bts + n * bt_ld + k, fusor::convert<T>(b[k * 8 + n]));
        Simt::store_shared(bs + k * b_ld + n, fusor::convert<T>(b[k * 8 + n]));
      }
  }
  Simt::sync_block();
  // Fragments by the PTX ISA's formula.
  auto A = [&](int m, int k) { return a[m * 16 + k]; };
  auto B = [&](int k, int n) { return b[k * 8 + n]; };
  const std::uint32_t fa[4] = {
      fd::pack_pair<T>(A(g, 2 * q), A(g, 2 * q + 1)),
      fd::pack_pair<T>(A(g + 8, 2 * q), A(g + 8, 2 * q + 1)),
      fd::pack_pair<T>(A(g, 2 * q + 8), A(g, 2 * q + 9)),
      fd::pack_pair<T>(A(g + 8, 2 * q + 8), A(g + 8, 2 * q + 9)),
  };
  const std::uint32_t fb0 = fd::pack_pair<T>(B(2 * q, g), B(2 * q + 1, g)),
                      fb1 = fd::pack_pair<T>(B(2 * q + 8, g), B(2 * q + 9, g));
  float acc[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  Simt::template mma<T>(acc, fa, fb0, fb1);
  out.by_formula[g * 8 + 2 * q] = acc[0], out.by_formula[g * 8 + 2 * q + 1] = acc[1];
  out.by_formula[(g + 8) * 8 + 2 * q] = acc[2], out.by_formula[(g + 8) * 8 + 2 * q + 1] = acc[3];

  // The same product from shared memory: A and B^T by ldmatrix, B by ldmatrix.trans.
  const int row8 = lane & 7, bit3 = (lane >> 3) & 1, bit4 = (lane >> 4) & 1;
  std::uint32_t la[4], lbt[4], lb[4];
  Simt::template ldmatrix_x4<false>(la, as + (row8 + bit3 * 8) * a_ld + bit4 * 8);
  // Matrices 2 and 3 repeat 0 and 1: x4 loads with 8 rows of B^T.
  Simt::template ldmatrix_x4<false>(lbt, bts + row8 * bt_ld + bit3 * 8);
  Simt::template ldmatrix_x4<true>(lb, bs + (bit3 * 8 + row8) * b_ld);
  const std::uint32_t got[8] = {la[0], la[1], la[2], la[3], lbt[0], lbt[1], lb[0], lb[1]};
  const std::uint32_t want[8] = {fa[0], fa[1], fa[2], fa[3], fb0, fb1, fb0, fb1};
  std::uint32_t mismatches = 0;
  for (int i = 0; i < 8; ++i)
    if (got[i] != want[i]) mismatches |= 1u << i;
  out.fragment_mismatches[lane] = mismatches;
  float acc2[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  Simt::template mma<T>(acc2, la, lb[0], lb[1]);
  out.by_ldmatrix[g * 8 + 2 * q] = acc2[0], out.by_ldmatrix[g * 8 + 2 * q + 1] = acc2[1];
  out.by_ldmatrix[(g + 8) * 8 + 2 * q] = acc2[2], out.by_ldmatrix[(g + 8) * 8 + 2 * q + 1] = acc2[3];
}

// NaN everywhere and every mismatch bit set: an element or lane the probe
// never wrote fails the check.
inline results poisoned_results() {
  results r;
  for (float& x : r.by_formula) x = std::nanf("");
  for (float& x : r.by_ldmatrix) x = std::nanf("");
  for (std::uint32_t& m : r.fragment_mismatches) m = ~0u;
  return r;
}

// Every lane's ldmatrix registers equal the formula's, and both products
// equal A B + 0.5 exactly.
inline void check(const std::vector<float>& a, const std::vector<float>& b, const results& r, const std::string& what) {
  for (int lane = 0; lane < 32; ++lane) {
    INFO(what, ": lane ", lane, ", mismatching registers (bits 0-3 A, 4-5 B^T, 6-7 B .trans): ",
         r.fragment_mismatches[lane]);
    CHECK(r.fragment_mismatches[lane] == 0u);
  }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = 0.5;
      for (int k = 0; k < 16; ++k) want += double(a[std::size_t(m * 16 + k)]) * double(b[std::size_t(k * 8 + n)]);
      INFO(what, ": D(", m, ", ", n, ")");
      CHECK(double(r.by_formula[m * 8 + n]) == want);  // small integers / 16: exact
      CHECK(double(r.by_ldmatrix[m * 8 + n]) == want);
    }
}

}  // namespace warp_mma_probe
