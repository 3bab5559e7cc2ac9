// fusor/kernels/reduce_ops.hpp — what the reductions compute, shared by the host
// and the CUDA implementation: one `reduction<Kind, Acc>` per kind (identity,
// how an element enters the accumulator, how two accumulators combine, how the
// result is finished), and the order in which elements of an expression are
// visited (memory order of its first full-shape leaf, so reads stay contiguous).
//
// Combining is associative and commutative for every kind (max/min propagate
// NaN; arg kinds are a total order on (value, index) with ties to the smaller
// index and NaN above everything), so any fixed tree order gives the same
// max/min/argmax bit for bit; sums depend on the order, which each backend fixes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda/std/array>
#include <cuda/std/cmath>
#include <cuda/std/limits>
#include <cuda/std/type_traits>
#include <cuda/std/utility>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/view.hpp"
#include "fusor/expr/node.hpp"

namespace fusor {

/// What a reduction computes: one kind per function of reduce.hpp (max and min are amax and amin).
enum class reduction_kind { sum, mean, sum_of_squares, norm, max, min, argmax, argmin };

namespace detail {

// ---- accumulate type of an expression ------------------------------------------
// A view accumulates in its precision's accumulate type (fp32 for bf16/fp16);
// a node in the widest of its value type and its strong leaves' accumulate types,
// but a node of bools (a comparison's result, whatever it compares) as bools;
// bools count in index_t, as more than 2^31 may be true.
template <class E>
struct accumulate_of {
  using type = typename E::value_type;
};
template <class P, class Ex, class L, class S>
struct accumulate_of<view<P, Ex, L, S>> {
  using type = accumulate_t<P>;
};
template <class Op, class... A>
struct accumulate_of<node<Op, A...>> {
  using value_type = typename node<Op, A...>::value_type;
  template <class Child>
  using strong = ::cuda::std::conditional_t<Child::weak, bool, typename accumulate_of<Child>::type>;
  using type = ::cuda::std::conditional_t<std::is_same_v<value_type, bool>, bool,
                                          ::cuda::std::common_type_t<value_type, strong<A>...>>;
};
template <class E>
using accumulate_of_t = ::cuda::std::conditional_t<std::is_same_v<typename accumulate_of<E>::type, bool>, index_t,
                                                   typename accumulate_of<E>::type>;

template <class T>
using floating_t = ::cuda::std::conditional_t<::cuda::std::is_floating_point_v<T>, T, double>;

template <class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr bool is_nan(const T& x) {
  if constexpr (::cuda::std::is_floating_point_v<T>) return x != x;
  else return false;
}
template <class T>
FUSOR_HOST_DEVICE constexpr T lowest_value() {
  if constexpr (::cuda::std::numeric_limits<T>::has_infinity) return -::cuda::std::numeric_limits<T>::infinity();
  else return ::cuda::std::numeric_limits<T>::lowest();
}
template <class T>
FUSOR_HOST_DEVICE constexpr T highest_value() {
  if constexpr (::cuda::std::numeric_limits<T>::has_infinity) return ::cuda::std::numeric_limits<T>::infinity();
  else return ::cuda::std::numeric_limits<T>::max();
}

// A value and where it was found (argmax/argmin).
template <class T>
struct arg_value {
  T value;
  index_t index;
};

constexpr bool is_arg(reduction_kind k) { return k == reduction_kind::argmax || k == reduction_kind::argmin; }
constexpr bool is_additive(reduction_kind k) {
  return k == reduction_kind::sum || k == reduction_kind::mean || k == reduction_kind::sum_of_squares ||
         k == reduction_kind::norm;
}
// Kinds with no identity a user would accept for zero elements.
constexpr bool needs_elements(reduction_kind k) { return !is_additive(k); }
// What reduction `Kind` of elements accumulating in `Acc` adds in: sums of integers narrower than 64 bits in
// int64, as PyTorch's do (255 + 1 in uint8 would wrap to 0); all else in `Acc`.
template <reduction_kind Kind, class Acc>
using widened_accumulate_t =
    ::cuda::std::conditional_t<is_additive(Kind) && ::cuda::std::is_integral_v<Acc> && (sizeof(Acc) < 8),
                               std::int64_t, Acc>;

constexpr const char* kind_name(reduction_kind k) {
  switch (k) {
    case reduction_kind::sum: return "sum";
    case reduction_kind::mean: return "mean";
    case reduction_kind::sum_of_squares: return "sum_of_squares";
    case reduction_kind::norm: return "norm";
    case reduction_kind::max: return "amax";
    case reduction_kind::min: return "amin";
    case reduction_kind::argmax: return "argmax";
    default: return "argmin";
  }
}

// ---- the reductions -------------------------------------------------------------
// Acc is the accumulate type of the input. `lift` turns an element (in its
// compute type) and its index into an accumulator; operator() combines two
// (a binary operation, as shuffles and trees want); `finish` turns the total of `count` elements into the result.
template <reduction_kind Kind, class Acc>
struct reduction {
  static constexpr reduction_kind kind = Kind;
  static constexpr bool additive = is_additive(Kind);
  static constexpr bool indexed = is_arg(Kind);
  using accumulator = ::cuda::std::conditional_t<indexed, arg_value<Acc>, Acc>;
  using result_type = ::cuda::std::conditional_t<
      indexed, index_t,
      ::cuda::std::conditional_t<Kind == reduction_kind::mean || Kind == reduction_kind::norm, floating_t<Acc>, Acc>>;

  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE accumulator identity() const {
    if constexpr (additive) return accumulator(0);
    else if constexpr (Kind == reduction_kind::max) return lowest_value<Acc>();
    else if constexpr (Kind == reduction_kind::min) return highest_value<Acc>();
    else if constexpr (Kind == reduction_kind::argmax)
      return {lowest_value<Acc>(), ::cuda::std::numeric_limits<index_t>::max()};
    else
      return {highest_value<Acc>(), ::cuda::std::numeric_limits<index_t>::max()};
  }

  template <class V>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE accumulator lift(const V& v, [[maybe_unused]] index_t index) const {
    const Acc x = convert<Acc>(v);
    if constexpr (Kind == reduction_kind::sum_of_squares || Kind == reduction_kind::norm) return x * x;
    else if constexpr (indexed) return {x, index};
    else return x;
  }

  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE accumulator operator()(const accumulator& a, const accumulator& b) const {
    if constexpr (additive) {
      return a + b;
    } else if constexpr (!indexed) {
      // NaN wins; otherwise the larger (max) or smaller (min).
      if (is_nan(a)) return a;
      if (is_nan(b)) return b;
      if constexpr (Kind == reduction_kind::max) return b > a ? b : a;
      else return b < a ? b : a;
    } else {
      // NaN counts as the extreme (as in PyTorch); ties go to the smaller index.
      const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
      if (a_nan || b_nan) {
        if (a_nan && b_nan) return a.index <= b.index ? a : b;
        return a_nan ? a : b;
      }
      const bool b_better = Kind == reduction_kind::argmax ? b.value > a.value : b.value < a.value;
      if (b_better) return b;
      if (b.value == a.value && b.index < a.index) return b;
      return a;
    }
  }

  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE result_type finish(const accumulator& total, index_t count) const {
    if constexpr (Kind == reduction_kind::mean) return result_type(total) / result_type(count);
    else if constexpr (Kind == reduction_kind::norm) return ::cuda::std::sqrt(result_type(total));
    else if constexpr (indexed) return total.index;
    else return total;
  }
};

// ---- element order --------------------------------------------------------------
// Walks `axes` of the R axes (outermost in memory first) as one linear range:
// position n <-> multi-index, with the axes not walked left at zero.
template <std::size_t R>
struct walk {
  ::cuda::std::array<int, R> axis_order{};
  ::cuda::std::array<index_t, R> extent{};
  int axes = 0;

  // Axis by axis with constant indices (set_axis); the outermost walked axis
  // takes what is left of n, without a division.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE ::cuda::std::array<index_t, R> index_of(index_t n) const {
    ::cuda::std::array<index_t, R> idx{};
    FUSOR_UNROLL
    for (int k = int(R) - 1; k > 0; --k) {
      if (k >= axes) continue;
      const int axis = axis_order[k];
      const index_t e = extent[axis];
      const index_t outer = n / e;
      set_axis(idx, axis, n - outer * e);
      n = outer;
    }
    if (axes > 0) set_axis(idx, axis_order[0], n);
    return idx;
  }
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void advance(::cuda::std::array<index_t, R>& idx) const {
    for (int k = axes - 1; k >= 0; --k) {
      const int axis = axis_order[k];
      if (++idx[axis] < extent[axis]) return;
      idx[axis] = 0;
    }
  }
};

// The layout a reduction follows: the strides of the first leaf that has the
// expression's full shape and knows its strides (a view), else row-major.
template <std::size_t R>
struct reference_layout {
  dense_shape<R> shape{};
  bool from_leaf = false;
  bool contiguous = false;  // that leaf is gap-free: memory positions are [0, n)
};

template <std::size_t R, class E, class X>
bool find_reference(const E& e, const X& full, reference_layout<R>& out) {
  if constexpr (requires { e.shape_and_strides(); e.is_contiguous(); }) {
    if constexpr (E::rank == R) {
      for (std::size_t k = 0; k != R; ++k)
        if (e.extent(k) != index_t(full.extent(k))) return false;
      out.shape = e.shape_and_strides();
      out.from_leaf = true;
      out.contiguous = e.is_contiguous();
      return true;
    } else {
      return false;
    }
  } else if constexpr (is_node_v<E>) {
    return [&]<std::size_t... I>(::cuda::std::index_sequence<I...>) {
      return (find_reference<R>(e.template child<I>(), full, out) || ...);
    }(::cuda::std::make_index_sequence<E::arity>{});
  } else {
    return false;
  }
}

template <std::size_t R, class E>
reference_layout<R> reference_of(const E& e) {
  reference_layout<R> ref;
  if (!find_reference<R>(e, e.extents(), ref)) {
    index_t stride = 1;
    for (std::size_t k = R; k-- > 0;) {
      ref.shape.extent[k] = index_t(e.extents().extent(k));
      ref.shape.stride[k] = stride;
      stride *= ref.shape.extent[k];
    }
  }
  return ref;
}

// A walk over every axis except `skip` (-1: none), outermost in memory first;
// ties (size-1 axes) in index order.
template <std::size_t R>
walk<R> make_walk(const reference_layout<R>& ref, int skip) {
  walk<R> w;
  for (int k = 0; k != int(R); ++k) {
    w.extent[k] = ref.shape.extent[k];
    if (k != skip) w.axis_order[w.axes++] = k;
  }
  for (int i = 1; i < w.axes; ++i)  // insertion sort: stable, R is small
    for (int j = i; j > 0 && ref.shape.stride[w.axis_order[j - 1]] < ref.shape.stride[w.axis_order[j]]; --j)
      ::cuda::std::swap(w.axis_order[j - 1], w.axis_order[j]);
  return w;
}

// ---- what a backend needs to reduce one expression --------------------------------
// Whole-tensor: positions [0, size) in memory order. Along an axis: outputs
// [0, outputs) in memory order of the other axes, `length` elements each.
template <class E, std::size_t R>
struct reduction_input {
  static constexpr std::size_t rank = R;
  using expression_type = E;
  E expression;
  walk<R> order;
  ::cuda::std::array<index_t, R> row_major_stride{};  // logical linear index (argmax over everything)
  ::cuda::std::array<index_t, R> memory_stride{};     // reference leaf's strides
  index_t size = 0;
  int axis = -1;
  index_t length = 0;
  index_t outputs = 0;
  // Element at memory position p is expression.load<1, false>(p): every leaf is laid
  // out like the gap-free reference leaf.
  bool linear = false;
  // ... and memory positions are logical row-major indices (a row-major layout).
  bool memory_is_logical = false;
  // Along an axis: the axis is the innermost in memory (stride 1 in a linear layout).
  bool axis_innermost = false;

  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t logical_index(const ::cuda::std::array<index_t, R>& idx) const {
    index_t n = 0;
    for (std::size_t k = 0; k != R; ++k) n += idx[k] * row_major_stride[k];
    return n;
  }
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE index_t memory_position(const ::cuda::std::array<index_t, R>& idx) const {
    index_t n = 0;
    for (std::size_t k = 0; k != R; ++k) n += idx[k] * memory_stride[k];
    return n;
  }
  // The value of element idx in the expression's compute type.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE auto at(const ::cuda::std::array<index_t, R>& idx) const {
    return expression.at(idx);
  }
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE auto at_position(index_t p) const {
    return expression.template load<1, false>(p)[0];
  }
};

template <class E>
auto make_reduction_input(const E& e, int axis) {
  constexpr std::size_t R = E::extents_type::rank();
  const reference_layout<R> ref = reference_of<R>(e);
  reduction_input<E, R> in{e, make_walk(ref, axis)};
  in.size = 1;
  for (std::size_t k = R; k-- > 0;) {
    in.row_major_stride[k] = in.size;
    in.size *= ref.shape.extent[k];
    in.memory_stride[k] = ref.shape.stride[k];
  }
  in.axis = axis;
  in.length = axis < 0 ? in.size : ref.shape.extent[axis];
  in.outputs = 1;
  for (std::size_t k = 0; k != R; ++k)
    if (int(k) != axis && axis >= 0) in.outputs *= ref.shape.extent[k];
  in.linear = ref.from_leaf && ref.contiguous && e.linear_with(ref.shape);
  in.memory_is_logical = in.linear;
  for (std::size_t k = 0; k != R; ++k)
    if (ref.shape.extent[k] != 1 && in.memory_stride[k] != in.row_major_stride[k]) in.memory_is_logical = false;
  if (axis >= 0) {
    in.axis_innermost = true;
    for (std::size_t k = 0; k != R; ++k)
      if (int(k) != axis && ref.shape.extent[k] != 1 && ref.shape.stride[k] < ref.shape.stride[axis])
        in.axis_innermost = false;
  }
  return in;
}

// Stores one result: into the single element of a whole-tensor destination
// (axis < 0), or at idx with the reduced axis at 0 (kept) or removed (dropped).
template <class D, std::size_t R, class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void store_output(const D& dst, ::cuda::std::array<index_t, R> idx, int axis,
                                                       const T& value) {
  constexpr std::size_t rank = D::rank;
  ::cuda::std::array<index_t, rank> at{};
  if constexpr (rank == R) {
    if (axis >= 0) {
      set_axis(idx, axis, 0);
      at = idx;
    }
  } else if constexpr (rank + 1 == R) {  // output axis k is input axis k before the reduced one, k + 1 after
    if (axis >= 0)
      FUSOR_UNROLL
      for (std::size_t k = 0; k != rank; ++k) at[k] = int(k) < axis ? idx[k] : idx[k + 1];
  }
  dst.store_at(at, value);
}

}  // namespace detail
}  // namespace fusor
