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
#include <vector>

#include <cuda/std/cmath>

#include "fusor/exec/host.hpp"
#include "fusor/kernels/rows.hpp"

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

template <bool Centered, class Y, class M, class R, class X, class W, class B>
void norm_forward_host(const norm_forward<Y, M, R, X, W, B>& f, float epsilon, const host_executor& ex) {
  using S = statistic_t<X>;
  const index_t n = f.x.length;
  for_each_row<S>(ex, f.x.rows, n, 0, [&](index_t r, S*) {
    const X* in = f.x.row(r);
    Y* out = f.y.row(r);
    const W* w = f.weight.data;
    const B* b = f.bias.data;
    with_unit_strides(
        [&](auto sx, auto sy, auto sw, auto sb) {
          S mean = 0;
          if constexpr (Centered) mean = row_sum<S>(n, [&](index_t j) { return convert<S>(in[j * sx]); }) / S(n);
          const S squares = row_sum<S>(n, [&](index_t j) {
            const S d = convert<S>(in[j * sx]) - mean;
            return d * d;
          });
          const S rstd = S(1) / ::cuda::std::sqrt(squares / S(n) + S(epsilon));
          FUSOR_OMP_SIMD()
          for (index_t j = 0; j < n; ++j) {
            S v = (convert<S>(in[j * sx]) - mean) * rstd * convert<S>(w[j * sw]);
            if constexpr (Centered) v += convert<S>(b[j * sb]);
            out[j * sy] = convert<Y>(v);
          }
          if constexpr (Centered) f.mean[r] = convert<M>(mean);
          f.rstd[r] = convert<R>(rstd);
        },
        f.x.column_stride, f.y.column_stride, f.weight.stride, Centered ? f.bias.stride : 1);
  });
}

template <bool Centered, class DX, class DW, class DB, class DY, class X, class W, class M, class R>
void norm_backward_host(const norm_backward<DX, DW, DB, DY, X, W, M, R>& b, const host_executor& ex) {
  using S = statistic_t<X>;
  const index_t n = b.x.length, rows = b.x.rows;
  const index_t width = Centered ? 2 * n : n;  // dweight, then dbias
  // At most 64 chunks, and at most 2^24 partial sums.
  const index_t max_chunks = std::max<index_t>(1, std::min<index_t>(64, (index_t(1) << 24) / std::max<index_t>(width, 1)));
  const index_t rows_per_chunk = std::max<index_t>(1, (rows + max_chunks - 1) / max_chunks);
  const index_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<S> partial(static_cast<std::size_t>(chunks * width), S(0));
  const int team = int(std::min<index_t>(ex.thread_count(rows * n), std::max<index_t>(chunks, 1)));

#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t chunk = 0; chunk < chunks; ++chunk) {
    S* acc = partial.data() + chunk * width;
    const index_t end = std::min(rows, (chunk + 1) * rows_per_chunk);
    for (index_t r = chunk * rows_per_chunk; r < end; ++r) {
      const X* xr = b.x.row(r);
      const DY* gr = b.dy.row(r);
      DX* dxr = b.dx.row(r);
      const W* w = b.weight.data;
      const S mean = Centered ? convert<S>(b.mean[r]) : S(0), rstd = convert<S>(b.rstd[r]);
      with_unit_strides(
          [&](auto sx, auto sg, auto sdx, auto sw) {
            // Sums of g = dy * w and of g * xhat.
            auto g = [&](index_t j) { return convert<S>(gr[j * sg]) * convert<S>(w[j * sw]); };
            const S sum_g = Centered ? row_sum<S>(n, g) : S(0);
            const S sum_gx = row_sum<S>(n, [&](index_t j) { return g(j) * (convert<S>(xr[j * sx]) - mean) * rstd; });
            const S mean_g = Centered ? sum_g / S(n) : S(0), mean_gx = sum_gx / S(n);
            FUSOR_OMP_SIMD()
            for (index_t j = 0; j < n; ++j) {
              const S xhat = (convert<S>(xr[j * sx]) - mean) * rstd;
              const S dy = convert<S>(gr[j * sg]);
              acc[j] += dy * xhat;
              if constexpr (Centered) acc[n + j] += dy;
              dxr[j * sdx] = convert<DX>(rstd * (dy * convert<S>(w[j * sw]) - mean_g - xhat * mean_gx));
            }
          },
          b.x.column_stride, b.dy.column_stride, b.dx.column_stride, b.weight.stride);
    }
  }

  const int column_team = ex.thread_count(n * chunks);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(column_team) schedule(static) if (column_team > 1)
#endif
  for (index_t c = 0; c < n; ++c) {
    S dweight = 0, dbias = 0;
    for (index_t chunk = 0; chunk < chunks; ++chunk) {
      dweight += partial[chunk * width + c];
      if constexpr (Centered) dbias += partial[chunk * width + n + c];
    }
    b.dweight[c] = convert<DW>(dweight);
    if constexpr (Centered) b.dbias[c] = convert<DB>(dbias);
  }
  (void)team, (void)column_team;
}

}  // namespace fusor::detail
