// fusor/kernels/layernorm_host.hpp — the operands of the normalisation kernels
// (layernorm.hpp) and their host implementation.
//
// Rows are spread over OpenMP threads and each row's loops vectorise. The
// forward is two-pass per row (mean, then squared deviations), exact for any
// row length. The backward sums the parameter gradients per fixed chunk of rows
// and then over the chunks in order, so dweight and dbias do not depend on the
// number of threads.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

#include <cuda/std/cmath>

#include "fusor/exec/host.hpp"
#include "fusor/kernels/rows.hpp"
#include "fusor/kernels/rows_host.hpp"

#if FUSOR_HAS_OPENMP
#include <omp.h>
#endif

namespace fusor::detail {

// Storage types of every operand; rmsnorm leaves mean and bias empty.
template <class Y, class M, class R, class X, class W, class B>
struct norm_forward {
  row_matrix<Y> y;
  per_row<M> mean;
  per_row<R> rstd;
  row_matrix<const X> x;
  per_column<W> weight;
  per_column<B> bias;
};
template <class DX, class DW, class DB, class DY, class X, class W, class M, class R>
struct norm_backward {
  row_matrix<DX> dx;
  per_column<DW> dweight;
  per_column<DB> dbias;
  row_matrix<const DY> dy;
  row_matrix<const X> x;
  per_column<W> weight;
  per_row<M> mean;
  per_row<R> rstd;
};

// One row; returns mean and rstd. Plain functions of pointers and strides,
// not lambdas over captured pointers, so the loops vectorise (softmax.hpp).
template <bool Centered, class S, class Y, class X, class W, class B, class SY, class SX, class SW, class SB>
std::pair<S, S> norm_forward_row_host(Y* out, const X* in, const W* w, const B* b, index_t n, SY sy, SX sx, SW sw,
                                      SB sb, S epsilon) {
  S mean = 0;
  if constexpr (Centered) mean = row_sum<S>(n, [=](index_t j) { return convert<S>(in[j * sx]); }) / S(n);
  const S squares = row_sum<S>(n, [=](index_t j) {
    const S d = convert<S>(in[j * sx]) - mean;
    return d * d;
  });
  const S rstd = S(1) / ::cuda::std::sqrt(squares / S(n) + epsilon);
  FUSOR_OMP_SIMD()
  for (index_t j = 0; j < n; ++j) {
    S v = (convert<S>(in[j * sx]) - mean) * rstd * convert<S>(w[j * sw]);
    if constexpr (Centered) v += convert<S>(b[j * sb]);
    out[j * sy] = convert<Y>(v);
  }
  return {mean, rstd};
}

template <bool Centered, class Y, class M, class R, class X, class W, class B>
void norm_forward_host(const norm_forward<Y, M, R, X, W, B>& f, float epsilon, const host_executor& ex) {
  using S = statistic_t<X>;
  for_each_row<S>(ex, f.x.rows, f.x.length, 0, [&](index_t r, S*) {
    with_unit_strides(
        [&](auto sy, auto sx, auto sw, auto sb) {
          const auto [mean, rstd] = norm_forward_row_host<Centered, S>(f.y.row(r), f.x.row(r), f.weight.data,
                                                                       f.bias.data, f.x.length, sy, sx, sw, sb,
                                                                       S(epsilon));
          if constexpr (Centered) f.mean[r] = convert<M>(mean);
          f.rstd[r] = convert<R>(rstd);
        },
        f.y.column_stride, f.x.column_stride, f.weight.stride, Centered ? f.bias.stride : 1);
  });
}

// dx of one row, its dweight (and dbias) terms added into acc.
template <bool Centered, class S, class DX, class DY, class X, class W, class SDX, class SDY, class SX, class SW>
void norm_backward_row_host(DX* dxr, S* acc, const DY* gr, const X* xr, const W* w, index_t n, SDX sdx, SDY sg,
                            SX sx, SW sw, S mean, S rstd) {
  // Sums of g = dy * w and of g * xhat, in one pass.
  auto g = [=](index_t j) { return convert<S>(gr[j * sg]) * convert<S>(w[j * sw]); };
  const auto [sum_g, sum_gx] =
      row_sums<S>(n, g, [=](index_t j) { return g(j) * (convert<S>(xr[j * sx]) - mean) * rstd; });
  const S mean_g = Centered ? sum_g / S(n) : S(0), mean_gx = sum_gx / S(n);
  FUSOR_OMP_SIMD()
  for (index_t j = 0; j < n; ++j) {
    const S xhat = (convert<S>(xr[j * sx]) - mean) * rstd;
    const S dy = convert<S>(gr[j * sg]);
    acc[j] += dy * xhat;
    if constexpr (Centered) acc[n + j] += dy;
    dxr[j * sdx] = convert<DX>(rstd * (dy * convert<S>(w[j * sw]) - mean_g - xhat * mean_gx));
  }
}

template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward_host(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b, const host_executor& ex) {
  using S = statistic_t<X>;
  const index_t n = b.x.length, rows = b.x.rows;
  const index_t width = Centered ? 2 * n : n;  // dweight, then dbias
  // At most 64 chunks of at least 32 rows: the partial sums stay small next to the rows.
  const index_t max_chunks = std::clamp<index_t>(rows / 32, 1, 64);
  const index_t rows_per_chunk = std::max<index_t>(1, (rows + max_chunks - 1) / max_chunks);
  const index_t chunks = std::max<index_t>(1, (rows + rows_per_chunk - 1) / rows_per_chunk);  // no rows: zeros
  std::vector<S> partial(static_cast<std::size_t>(chunks * width), S(0));
  const int team = int(std::min<index_t>(ex.thread_count(rows * n), std::max<index_t>(chunks, 1)));

#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t chunk = 0; chunk < chunks; ++chunk) {
    S* acc = partial.data() + chunk * width;
    const index_t end = std::min(rows, (chunk + 1) * rows_per_chunk);
    for (index_t r = chunk * rows_per_chunk; r < end; ++r) {
      const S mean = Centered ? convert<S>(b.mean[r]) : S(0), rstd = convert<S>(b.rstd[r]);
      with_unit_strides(
          [&](auto sdx, auto sg, auto sx, auto sw) {
            norm_backward_row_host<Centered>(b.dx.row(r), acc, b.dy.row(r), b.x.row(r), b.weight.data, n, sdx, sg,
                                             sx, sw, mean, rstd);
          },
          b.dx.column_stride, b.dy.column_stride, b.x.column_stride, b.weight.stride);
    }
  }

  // Chunk sums added in chunk order, column by column (vectorised over columns).
  const int column_team = ex.thread_count(width * chunks);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(column_team) schedule(static) if (column_team > 1)
#endif
  for (index_t begin = 0; begin < width; begin += 1024) {
    const index_t end = std::min(width, begin + 1024);
    S* total = partial.data();
    for (index_t chunk = 1; chunk < chunks; ++chunk) {
      const S* part = partial.data() + chunk * width;
      FUSOR_OMP_SIMD()
      for (index_t c = begin; c < end; ++c) total[c] += part[c];
    }
    for (index_t c = begin; c < end; ++c) {
      if (c < n) b.dweight[c] = convert<DW>(total[c]);
      else if constexpr (Centered) b.dbias[c - n] = convert<DB>(total[c]);
    }
  }
  (void)team, (void)column_team;
}

}  // namespace fusor::detail
