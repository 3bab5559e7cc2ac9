// fusor/kernels/attention_operands.hpp — how causal attention's kernels
// (attention.hpp, attention_rotary.hpp) see their operands on the host and on
// the GPU: qkv, y and their gradients as [batch, time, columns] rows with unit
// column stride, the log-sum-exp as [batch, heads, time], the head layout.
// Everything here is trivially copyable, a kernel parameter.
#pragma once

#include <string>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"

namespace fusor {

/// How the heads of qkv are laid out: `heads` query heads and `kv_heads` key
/// and value heads each (0: as many as query heads; it must divide `heads`).
struct attention_heads {
  index_t heads = 1;     ///< Query heads.
  index_t kv_heads = 0;  ///< Key heads and value heads each; 0: as many as query heads.
};

}  // namespace fusor

namespace fusor::detail {

// ---- operands (host and CUDA) ------------------------------------------------------------
// [batch, time, width] with unit stride along width: qkv, y and their gradients.
template <class T>
struct attention_rows {
  T* data = nullptr;
  index_t batch_stride = 0;
  index_t time_stride = 0;
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T* row(index_t b, index_t t) const {
    return data + b * batch_stride + t * time_stride;
  }
};
// The per-row log-sum-exp, [batch, heads, time], any strides.
template <class T>
struct attention_statistics {
  T* data = nullptr;
  index_t batch_stride = 0;
  index_t head_stride = 0;
  index_t time_stride = 0;
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T& at(index_t b, index_t h, index_t t) const {
    return data[b * batch_stride + h * head_stride + t * time_stride];
  }
};
// Sizes: qkv rows hold H query heads, then G key heads, then G value heads of D columns.
struct attention_geometry {
  index_t batch = 0, time = 0, heads = 0, kv_heads = 0, head_dim = 0;
  FUSOR_HOST_DEVICE index_t group() const { return heads / kv_heads; }  // query heads per kv head
  FUSOR_HOST_DEVICE index_t query_column(index_t h) const { return h * head_dim; }
  FUSOR_HOST_DEVICE index_t key_column(index_t g) const { return (heads + g) * head_dim; }
  FUSOR_HOST_DEVICE index_t value_column(index_t g) const { return (heads + kv_heads + g) * head_dim; }
};
template <class T>
attention_rows<const T> as_input(const attention_rows<T>& r) {
  return {r.data, r.batch_stride, r.time_stride};
}
template <class T>
attention_statistics<const T> as_input(const attention_statistics<T>& s) {
  return {s.data, s.batch_stride, s.head_stride, s.time_stride};
}

template <class Y, class L, class QKV>
struct attention_forward {
  attention_rows<Y> y;
  attention_statistics<L> lse;
  attention_rows<const QKV> qkv;
  attention_geometry shape;
};
template <class DQKV, class DY, class QKV, class Y, class L>
struct attention_backward {
  attention_rows<DQKV> dqkv;
  attention_rows<const DY> dy;
  attention_rows<const QKV> qkv;
  attention_rows<const Y> y;
  attention_statistics<const L> lse;
  attention_geometry shape;
};

// f(std::integral_constant<int, Dp>) for the head size padded to 16, 32, 64
// or 128: the sizes the CUDA kernels (and their host emulation) are compiled for.
template <class F>
void with_padded_head_dim(const char* what, index_t head_dim, F&& f) {
  if (head_dim <= 16)
    f(std::integral_constant<int, 16>{});
  else if (head_dim <= 32)
    f(std::integral_constant<int, 32>{});
  else if (head_dim <= 64)
    f(std::integral_constant<int, 64>{});
  else if (head_dim <= 128)
    f(std::integral_constant<int, 128>{});
  else
    throw error(std::string("fusor: ") + what + " on the cuda executor takes heads of up to 128 columns, not " +
                std::to_string(head_dim));
}

// Checked views as operands (their shapes are checked by attention.hpp).
template <class V>
attention_rows<typename V::element_type> attention_rows_of(const char* op, const char* name, const V& v) {
  static_assert(V::rank == 3, "fusor: attention's qkv, y, dy and dqkv are rank-3 views [batch, time, columns]");
  if (v.extent(2) > 1 && v.stride(2) != 1)
    throw shape_error(std::string("fusor: ") + op + ": " + name + " of shape " + shape_string(v.extents()) +
                      " needs unit stride along its last axis (it has " + std::to_string(v.stride(2)) + ")");
  return {v.data(), v.stride(0), v.stride(1)};
}
template <class V>
attention_statistics<typename V::element_type> attention_statistics_of(const V& v) {
  static_assert(V::rank == 3, "fusor: attention's lse is a rank-3 view [batch, heads, time]");
  static_assert(std::is_same_v<std::remove_const_t<typename V::element_type>, float> ||
                    std::is_same_v<std::remove_const_t<typename V::element_type>, double>,
                "fusor: attention's lse is float (or double)");
  return {v.data(), v.stride(0), v.stride(1), v.stride(2)};
}
// What the kernels compute and accumulate in: fp64 for fp64 data, fp32 otherwise.
template <class T>
using attention_compute_t = accumulate_t<std::remove_const_t<T>>;

}  // namespace fusor::detail
