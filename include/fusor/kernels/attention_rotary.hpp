// fusor/kernels/attention_rotary.hpp — rotary position embeddings (RoPE) on
// the queries and keys of a qkv tensor (attention.hpp's layout), as LLaMA
// applies them, under the host and the cuda executor.
//
//   rotary_embedding(out, qkv, {.heads = 6, .kv_heads = 2}, {.base = 10000}, ex);
//
// Columns (2i, 2i + 1) of every query and key head of the row at position t
// are rotated by the angle t * base^(-2i / D) (Meta's LLaMA: view_as_complex
// over pairs of neighbours, not the halves of HF's rotate_half):
//   out[2i]     = x[2i] cos - x[2i+1] sin
//   out[2i + 1] = x[2i] sin + x[2i+1] cos
// Value columns are copied. `inverse` rotates by minus the angle: the rotation
// is orthogonal, so that is its backward (dqkv = rotary_embedding(d rotated,
// inverse)). out may be the input. The angle is t * inv_freq in fp32 (fp64
// for fp64 data), inv_freq = base^(-2i / D) rounded from fp64, as PyTorch's
// LLaMA computes its table in fp32. D must be even.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/attention_operands.hpp"
#include "fusor/kernels/rows.hpp"
#include "fusor/kernels/rows_host.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/row_reduce.hpp"
#endif

namespace fusor {

/// Options of rotary_embedding.
struct rotary_options {
  double base = 10000;   ///< Columns (2i, 2i + 1) of position t turn by the angle t * base^(-2i / D).
  bool inverse = false;  ///< Rotate by -angle (the backward).
};

namespace detail {

template <class Out, class In>
struct rotary_operands {
  attention_rows<Out> out;
  attention_rows<const In> in;
  attention_geometry shape;
  double base;
  bool inverse;
};

template <class S>
S rotary_frequency(double base, index_t pair, index_t head_dim) {
  return S(std::pow(base, -2.0 * double(pair) / double(head_dim)));
}

template <class Out, class In>
void rotary_embedding_host(const rotary_operands<Out, In>& r, const host_executor& ex) {
  using S = attention_compute_t<In>;
  const attention_geometry& g = r.shape;
  const index_t half = g.head_dim / 2, rotated = g.heads + g.kv_heads, all = g.heads + 2 * g.kv_heads;
  // cos and sin of every (position, pair): T * D / 2 of each, shared by every head and sample.
  std::vector<S> table(std::size_t(2 * g.time * half));
  for (index_t i = 0; i < half; ++i) {
    const S frequency = rotary_frequency<S>(r.base, i, g.head_dim);
    for (index_t t = 0; t < g.time; ++t) {
      const S angle = S(t) * frequency;
      table[std::size_t(2 * (t * half + i))] = std::cos(angle);
      table[std::size_t(2 * (t * half + i) + 1)] = r.inverse ? -std::sin(angle) : std::sin(angle);
    }
  }
  for_each_row<S>(ex, g.batch * g.time, all * g.head_dim, 0, [&](index_t row, S*) {
    const index_t b = row / g.time, t = row % g.time;
    const In* x = r.in.row(b, t);
    Out* y = r.out.row(b, t);
    const S* cs = table.data() + 2 * t * half;
    for (index_t head = 0; head < rotated; ++head) {
      const In* xh = x + head * g.head_dim;
      Out* yh = y + head * g.head_dim;
      FUSOR_OMP_SIMD()
      for (index_t i = 0; i < half; ++i) {
        const S a = convert<S>(xh[2 * i]), c = convert<S>(xh[2 * i + 1]);
        yh[2 * i] = convert<Out>(a * cs[2 * i] - c * cs[2 * i + 1]);
        yh[2 * i + 1] = convert<Out>(a * cs[2 * i + 1] + c * cs[2 * i]);
      }
    }
    if (static_cast<const void*>(x) != static_cast<const void*>(y))
      for (index_t c = rotated * g.head_dim; c < all * g.head_dim; ++c) y[c] = convert<Out>(x[c]);
  });
}

#if FUSOR_HAS_CUDA
// One thread per pair of columns; value pairs are copied.
template <class Out, class In>
__global__ void rotary_embedding_kernel(const rotary_operands<Out, In> r) {
  using S = attention_compute_t<In>;
  const attention_geometry& g = r.shape;
  const index_t half = g.head_dim / 2, pairs_per_row = (g.heads + 2 * g.kv_heads) * half;
  const index_t total = g.batch * g.time * pairs_per_row;
  for (index_t n = index_t(blockIdx.x) * blockDim.x + threadIdx.x; n < total; n += index_t(gridDim.x) * blockDim.x) {
    const index_t row = n / pairs_per_row, pair = n % pairs_per_row;
    const index_t b = row / g.time, t = row % g.time, head = pair / half, i = pair % half;
    const In* x = r.in.row(b, t) + 2 * pair;
    Out* y = r.out.row(b, t) + 2 * pair;
    const S a = convert<S>(x[0]), c = convert<S>(x[1]);
    if (head < g.heads + g.kv_heads) {
      const S angle = S(t) * S(::pow(r.base, -2.0 * double(i) / double(g.head_dim)));
      S sine, cosine;
      if constexpr (std::is_same_v<S, double>)
        ::sincos(angle, &sine, &cosine);
      else
        ::sincosf(angle, &sine, &cosine);
      if (r.inverse) sine = -sine;
      y[0] = convert<Out>(a * cosine - c * sine);
      y[1] = convert<Out>(a * sine + c * cosine);
    } else {
      y[0] = convert<Out>(a);
      y[1] = convert<Out>(c);
    }
  }
}

template <class Out, class In>
void rotary_embedding_cuda(const rotary_operands<Out, In>& r, const cuda_executor& ex) {
  gpu::require("rotary_embedding on the cuda executor");
  const attention_geometry& g = r.shape;
  const index_t total = g.batch * g.time * (g.heads + 2 * g.kv_heads) * (g.head_dim / 2);
  if (total == 0) return;
  const int grid = int(std::min<index_t>((total + 255) / 256, index_t(gpu::multiprocessor_count()) * 16));
  launch_kernel<rotary_embedding_kernel<Out, In>>(grid, 256, 0, ex.stream, r);
}
#endif  // FUSOR_HAS_CUDA

template <class O, class I>
auto rotary_operands_of(const O& out, const I& in, const attention_heads& heads, const rotary_options& options) {
  constexpr const char* op = "rotary_embedding";
  static_assert(O::rank == 3 && I::rank == 3, "fusor: rotary_embedding takes rank-3 views [batch, time, columns]");
  require_same_shape(op, "out", out, "qkv", in);
  const index_t h = heads.heads, g = heads.kv_heads > 0 ? heads.kv_heads : heads.heads;
  if (h < 1 || heads.kv_heads < 0 || h % g != 0)
    throw shape_error(std::string("fusor: ") + op + ": " + std::to_string(h) + " query heads cannot share " +
                      std::to_string(g) + " key/value heads: it must divide them");
  const index_t width = in.extent(2), columns = (h + 2 * g);
  if (width % columns != 0 || (width / columns) % 2 != 0)
    throw shape_error(std::string("fusor: ") + op + ": qkv of shape " + shape_string(in.extents()) +
                      " does not split into " + std::to_string(columns) +
                      " heads of an even number of columns (rotary embeddings rotate pairs)");
  rotary_operands<typename O::element_type, typename I::element_type> r;
  r.shape = {in.extent(0), in.extent(1), h, g, width / columns};
  r.out = attention_rows_of(op, "out", out);
  r.in = as_input(attention_rows_of(op, "qkv", in));
  r.base = options.base;
  r.inverse = options.inverse;
  return r;
}

}  // namespace detail

/// out = qkv with rotary position embeddings applied to every query and key head (values copied); out may
/// be qkv. On the host.
template <row_operand Out, row_operand In>
void rotary_embedding(const Out& out, const In& qkv, const attention_heads& heads, const rotary_options& options = {},
                      const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Out, In>,
                "fusor: rotary_embedding on the host executor needs its operands in host-accessible memory");
  detail::rotary_embedding_host(detail::rotary_operands_of(as_view(out), as_view(qkv), heads, options), ex);
}
#if FUSOR_HAS_CUDA
/// rotary_embedding, queued on the cuda executor's stream.
template <row_operand Out, row_operand In>
void rotary_embedding(const Out& out, const In& qkv, const attention_heads& heads, const rotary_options& options,
                      const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Out, In>,
                "fusor: rotary_embedding on the cuda executor needs its operands in device-accessible memory");
  detail::rotary_embedding_cuda(detail::rotary_operands_of(as_view(out), as_view(qkv), heads, options), ex);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor
