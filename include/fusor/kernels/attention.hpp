// fusor/kernels/attention.hpp — causal multi-head self-attention, forward and
// backward, under the host and the cuda executor, never forming the T x T matrix.
//
//   causal_attention(y, lse, qkv, {.heads = 6}, ex);
//       y[b, t, h*D + x] = sum over s <= t of softmax_s(q_t . k_s / sqrt(D)) v_s[x]
//   causal_attention_backward(dqkv, dy, qkv, y, lse, {.heads = 6}, ex);
//
// qkv is [batch, T, (H + 2G) * D] as nanoGPT's c_attn produces it: the H
// query heads (head h at columns h * D), then G key heads, then G value heads.
// Query head h attends with key/value head h / (H / G) (grouped-query
// attention; G = H, the default, is plain multi-head attention, G = 1
// multi-query). y is [batch, T, H * D] (head h at columns h * D: nanoGPT's
// output after transpose and view) and lse [batch, H, T] keeps each row's
// log-sum-exp of the scaled scores for the backward (fp32, fp64 for fp64 data).
// dqkv has qkv's layout; dy y's. The last axis of qkv, y, dy and dqkv must
// have unit stride; the others any stride; lse any strides.
//
// bf16/fp16 data accumulates in fp32, fp64 in fp64. The backward is
// deterministic on both executors (no atomics). Rotary position embeddings:
// attention_rotary.hpp. Host: attention_host.hpp; CUDA: attention_cuda.hpp.
#pragma once

#include <string>
#include <type_traits>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/kernels/attention_host.hpp"
#include "fusor/kernels/attention_operands.hpp"
#include "fusor/kernels/attention_rotary.hpp"
#include "fusor/kernels/rows.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/exec/cuda.hpp"
#include "fusor/kernels/attention_cuda.hpp"
#endif

namespace fusor {

namespace detail {
template <class V>
void require_attention_data() {
  using T = std::remove_const_t<typename V::element_type>;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16> ||
                    std::is_same_v<T, float16>,
                "fusor: attention takes float, double, bfloat16 or float16 data");
}

// The sizes, from y's width and the head counts, with qkv and lse checked against them.
template <class Y, class L, class QKV>
attention_geometry attention_shape_of(const char* op, const Y& y, const L& lse, const QKV& qkv,
                                      const attention_heads& heads) {
  const index_t h = heads.heads, g = heads.kv_heads > 0 ? heads.kv_heads : heads.heads;
  if (h < 1 || heads.kv_heads < 0 || h % g != 0)
    throw shape_error(std::string("fusor: ") + op + ": " + std::to_string(h) + " query heads cannot share " +
                      std::to_string(g) + " key/value heads: it must divide them");
  if (y.extent(2) % h != 0 || y.extent(2) == 0)
    throw shape_error(std::string("fusor: ") + op + ": y of shape " + shape_string(y.extents()) +
                      " does not split into " + std::to_string(h) + " heads of at least one column");
  const attention_geometry shape{y.extent(0), y.extent(1), h, g, y.extent(2) / h};
  const index_t width = (h + 2 * g) * shape.head_dim;
  if (qkv.extent(0) != shape.batch || qkv.extent(1) != shape.time || qkv.extent(2) != width)
    throw shape_error(std::string("fusor: ") + op + ": qkv has shape " + shape_string(qkv.extents()) +
                      " but y has shape " + shape_string(y.extents()) + "; with " + std::to_string(h) +
                      " query heads and " + std::to_string(g) + " key/value heads of " +
                      std::to_string(shape.head_dim) + " columns qkv must be [" + std::to_string(shape.batch) + ", " +
                      std::to_string(shape.time) + ", " + std::to_string(width) + "]");
  if (lse.extent(0) != shape.batch || lse.extent(1) != h || lse.extent(2) != shape.time)
    throw shape_error(std::string("fusor: ") + op + ": lse has shape " + shape_string(lse.extents()) +
                      " but y has shape " + shape_string(y.extents()) + "; with " + std::to_string(h) +
                      " heads lse must be [" + std::to_string(shape.batch) + ", " + std::to_string(h) + ", " +
                      std::to_string(shape.time) + "] (batch, heads, time)");
  return shape;
}

template <class Y, class L, class QKV>
auto attention_forward_operands(const Y& y, const L& lse, const QKV& qkv, const attention_heads& heads) {
  constexpr const char* op = "causal_attention";
  require_attention_data<Y>(), require_attention_data<QKV>();
  attention_forward<typename Y::element_type, typename L::element_type, typename QKV::element_type> f;
  f.shape = attention_shape_of(op, y, lse, qkv, heads);
  f.y = attention_rows_of(op, "y", y);
  f.lse = attention_statistics_of(lse);
  f.qkv = as_input(attention_rows_of(op, "qkv", qkv));
  return f;
}
template <class DQKV, class DY, class QKV, class Y, class L>
auto attention_backward_operands(const DQKV& dqkv, const DY& dy, const QKV& qkv, const Y& y, const L& lse,
                                 const attention_heads& heads) {
  constexpr const char* op = "causal_attention_backward";
  require_attention_data<DQKV>(), require_attention_data<DY>(), require_attention_data<QKV>(),
      require_attention_data<Y>();
  require_same_shape(op, "dy", dy, "y", y);
  require_same_shape(op, "dqkv", dqkv, "qkv", qkv);
  attention_backward<typename DQKV::element_type, typename DY::element_type, typename QKV::element_type,
                     typename Y::element_type, typename L::element_type>
      w;
  w.shape = attention_shape_of(op, y, lse, qkv, heads);
  w.dqkv = attention_rows_of(op, "dqkv", dqkv);
  w.dy = as_input(attention_rows_of(op, "dy", dy));
  w.qkv = as_input(attention_rows_of(op, "qkv", qkv));
  w.y = as_input(attention_rows_of(op, "y", y));
  w.lse = as_input(attention_statistics_of(lse));
  return w;
}
}  // namespace detail

// ---- host ----------------------------------------------------------------------------------
/// y = causal self-attention of the heads in qkv ([batch, T, (H + 2G) * D]), saving each row's log-sum-exp
/// in lse ([batch, H, T]) for the backward; on the host.
template <row_operand Y, row_operand L, row_operand QKV>
void causal_attention(const Y& y, const L& lse, const QKV& qkv, const attention_heads& heads,
                      const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<Y, L, QKV>,
                "fusor: causal_attention on the host executor needs its operands in host-accessible memory");
  detail::attention_forward_host(detail::attention_forward_operands(as_view(y), as_view(lse), as_view(qkv), heads), ex);
}
/// dqkv, the gradient of causal_attention's qkv, from dy and the forward's y and lse; deterministic, on the host.
template <row_operand DQKV, row_operand DY, row_operand QKV, row_operand Y, row_operand L>
void causal_attention_backward(const DQKV& dqkv, const DY& dy, const QKV& qkv, const Y& y, const L& lse,
                               const attention_heads& heads, const host_executor& ex = {}) {
  static_assert(detail::host_reachable_v<DQKV, DY, QKV, Y, L>,
                "fusor: causal_attention_backward on the host executor needs its operands in host-accessible memory");
  detail::attention_backward_host(
      detail::attention_backward_operands(as_view(dqkv), as_view(dy), as_view(qkv), as_view(y), as_view(lse), heads),
      ex);
}

// ---- cuda ----------------------------------------------------------------------------------
#if FUSOR_HAS_CUDA
/// causal_attention, queued on the cuda executor's stream.
template <row_operand Y, row_operand L, row_operand QKV>
void causal_attention(const Y& y, const L& lse, const QKV& qkv, const attention_heads& heads, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<Y, L, QKV>,
                "fusor: causal_attention on the cuda executor needs its operands in device-accessible memory");
  detail::attention_forward_cuda(detail::attention_forward_operands(as_view(y), as_view(lse), as_view(qkv), heads), ex);
}
/// causal_attention_backward, queued on the cuda executor's stream.
template <row_operand DQKV, row_operand DY, row_operand QKV, row_operand Y, row_operand L>
void causal_attention_backward(const DQKV& dqkv, const DY& dy, const QKV& qkv, const Y& y, const L& lse,
                               const attention_heads& heads, const cuda_executor& ex) {
  static_assert(detail::device_reachable_v<DQKV, DY, QKV, Y, L>,
                "fusor: causal_attention_backward on the cuda executor needs its operands in device-accessible memory");
  detail::attention_backward_cuda(
      detail::attention_backward_operands(as_view(dqkv), as_view(dy), as_view(qkv), as_view(y), as_view(lse), heads),
      ex);
}
#endif  // FUSOR_HAS_CUDA

}  // namespace fusor
