// fusor/exec/pass.hpp — one pass over memory: what every executor runs.
//
// A pass is a set of targets (destination + expression) of one shape, and one
// plan for walking it: linearly (every operand is laid out like the first
// destination, so element i of each is at offset i, V at a time), by rows
// (every operand consecutive and aligned, or broadcast, along the innermost
// axis: V at a time, a multi-index per step; the GPU's path for broadcast
// operands), or by
// multi-index in the destination's memory order (any layout, broadcasting).
// All values of a step are computed before any is stored, so an output may
// alias an input (x = x * 2 + y) and several outputs may feed each other.
// Aliasing must be element for element: a destination overlapping a shifted
// view of an input (its transpose, a slice, a broadcast row) would read
// elements already overwritten, and race on the GPU: make_pass refuses it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <cuda/std/array>
#include <cuda/std/tuple>
#include <cuda/std/utility>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/view.hpp"
#include "fusor/expr/node.hpp"

namespace fusor {

/// A destination and the expression to store into it.
template <class Destination, class Expression>
struct target {
  using destination_type = Destination;  ///< The destination's type (a view).
  using expression_type = Expression;  ///< The expression's type.
  Destination destination;  ///< Where the values go.
  Expression expression;  ///< What is stored there.
};

/// What can be assigned to: a view, or a leaf built on one.
template <class D>
concept assignable = requires(const D& d) {
  d.shape_and_strides();
  d.is_contiguous();
  d.data();
};

/// out(dst, expr): one target of a multi-output assignment.
template <class D, class E>
auto out(D&& destination, E&& expr) {
  // A tensor owns its elements, so a const one keeps them; a view's constness is its element type's.
  static_assert(!(is_tensor_v<std::remove_cvref_t<D>> && std::is_const_v<std::remove_reference_t<D>>),
                "fusor: the destination of an assignment is a const tensor: its elements are not to be written");
  auto d = as_expression(std::forward<D>(destination));
  auto e = as_expression(std::forward<E>(expr));
  static_assert(assignable<decltype(d)>, "fusor: the destination of an assignment must be a view or a tensor");
  return target<decltype(d), decltype(e)>{d, e};
}

// ---- compile-time checks over a tree ------------------------------------------
namespace detail {
template <class E>
struct leaves_in {
  template <class Space>
  static constexpr bool accessible(bool from_host) {
    return from_host ? Space::host_accessible : Space::device_accessible;
  }
  static constexpr bool check(bool from_host) {
    if constexpr (requires { typename E::space; })
      return accessible<typename E::space>(from_host);
    else
      return true;
  }
};
template <class Op, class... A>
struct leaves_in<node<Op, A...>> {
  static constexpr bool check(bool from_host) { return (leaves_in<A>::check(from_host) && ...); }
};

template <class E>
inline constexpr bool has_placeholder_v = std::is_same_v<typename E::value_type, unbound>;

// Whether a memory leaf of E shows in its type that it may broadcast against a rank-R destination: fewer axes,
// or an axis of static extent 1. Only such passes compile the row path (one more kernel each): a size-1 axis
// known only at run time, in a tree of full-rank leaves, stays on the strided path.
template <class X, std::size_t... A>
constexpr bool has_static_one(std::index_sequence<A...>) {  // a fold: a loop over no axes draws nvcc warnings
  return ((X::static_extent(A) == 1) || ...);
}
template <class E, std::size_t R>
struct visible_broadcast {
  static constexpr bool value = [] {
    if constexpr (requires { typename E::space; }) {
      using X = typename E::extents_type;
      return X::rank() < R || has_static_one<X>(std::make_index_sequence<X::rank()>{});
    } else {
      return false;
    }
  }();
};
template <class Op, class... A, std::size_t R>
struct visible_broadcast<node<Op, A...>, R> {
  static constexpr bool value = (visible_broadcast<A, R>::value || ...);
};
}  // namespace detail

/// Whether every memory operand of `Target` (a target) is host-accessible.
template <class Target>
inline constexpr bool target_readable_from_host_v =
    detail::leaves_in<typename Target::destination_type>::check(true) &&
    detail::leaves_in<typename Target::expression_type>::check(true);
/// Whether every memory operand of `Target` (a target) is device-accessible.
template <class Target>
inline constexpr bool target_readable_from_device_v =
    detail::leaves_in<typename Target::destination_type>::check(false) &&
    detail::leaves_in<typename Target::expression_type>::check(false);

/// Whether `Executor` can read and write memory of `Space`: host memory on the host executor, device memory on the
/// cuda executor, pinned and managed memory on both.
template <class Executor, class Space>
inline constexpr bool executor_reaches_v =
    Executor::template can_run<target<view<float, extents<index_t, 1>, row_major, Space>, literal<float>>>;

/// The message of an operand the executor cannot reach (one string literal, for static_assert).
#define FUSOR_MEMORY_SPACE_MESSAGE                                                                                  \
  "fusor: an operand lives in a memory space this executor cannot read or write: use device_space (or pinned) "     \
  "memory with the cuda executor and host_space (or pinned) memory with the host executor, or fusor::copy it across"
/// The message of an expression assigned with placeholders left (one string literal, for static_assert).
#define FUSOR_PLACEHOLDER_MESSAGE \
  "fusor: this expression still has placeholders (arg<N>); substitute() operands for them first"

namespace detail {
template <class... Targets>
struct first_static_fit_failure {
  using type = static_shapes_must_match<shape<>, shape<>, true>;
};
template <class T, class... Rest>
struct first_static_fit_failure<T, Rest...> {
  using check = static_fit_check<typename T::destination_type::extents_type, typename T::expression_type::extents_type>;
  using type = std::conditional_t<check::value, typename first_static_fit_failure<Rest...>::type, check>;
};
}  // namespace detail

/// The compile-time checks of assigning `Targets` on `Executor`. assign and assign_many static_assert each
/// (fusor's message names the fix) and go no deeper when one fails, so a mistake is one error, not a cascade.
template <class Executor, class... Targets>
struct assignment_checks {
  /// Every operand is in memory the executor can read and write.
  static constexpr bool reachable = (Executor::template can_run<Targets> && ...);
  /// No expression has placeholders left.
  static constexpr bool substituted = (!detail::has_placeholder_v<typename Targets::expression_type> && ...);
  /// The static_shapes_must_match of the first target whose expression's static shape does not fit its destination's
  /// (value false), else one whose value is true.
  using shapes = typename detail::first_static_fit_failure<Targets...>::type;
  /// Every check holds.
  static constexpr bool ok = sizeof...(Targets) > 0 && reachable && substituted && shapes::value;
};

namespace detail {
// Whether destination D can be written row by row (views; not the optimizers' master-and-parameters pair).
template <class D, std::size_t R>
concept row_writable = row_readable<D, R> && requires(const D& d) { d.stride(std::size_t(0)); };
}  // namespace detail

// ---- the pass -----------------------------------------------------------------
/// One pass over memory: targets of one shape (made by make_pass), walked by an executor.
///
/// All values of a step are computed before any is stored, so an output may alias an input element for element.
template <std::size_t Rank, class... Targets>
struct pass {
  static constexpr std::size_t rank = Rank;  ///< The destinations' rank.
  detail::packed<Targets...> targets;  ///< The targets, by value; read them with get().
  index_t size;  ///< Elements per destination.
  /// Axes from outermost to innermost in memory, and their extents: the order
  /// the strided walk follows, so contiguous memory is walked contiguously.
  ::cuda::std::array<int, Rank> axis_order;
  ::cuda::std::array<index_t, Rank> extent;  ///< Extent of each axis, by axis index.

  /// Bytes of the narrowest element any target reads or writes (16 at most).
  static constexpr std::size_t narrowest =
      detail::min_size({std::min(sizeof(typename Targets::destination_type::element_type),
                                 Targets::expression_type::narrowest_element)...});
  /// Elements per step on the GPU's linear path: 16 bytes of the narrowest operand.
  static constexpr int device_lanes = int(16 / narrowest);
  /// Whether every destination and expression can be walked by rows (row_step) and some operand's type shows
  /// a broadcast: make_pass plans rows, and executors compile the row path, only then.
  static constexpr bool row_capable =
      Rank > 0 &&
      ((detail::row_writable<typename Targets::destination_type, Rank> &&
        detail::row_readable<typename Targets::expression_type, Rank>) && ...) &&
      (detail::visible_broadcast<typename Targets::expression_type, Rank>::value || ...);

  /// Target `I`.
  template <std::size_t I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE const auto& get() const { return detail::get<I>(targets); }

  /// Elements [i, i + V) of every target, read first and stored after.
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void linear_step(index_t i) const {
    linear_step_impl<V, Aligned>(i, ::cuda::std::make_index_sequence<sizeof...(Targets)>{});
  }
  /// The element at multi-index `idx` of every target, read first and stored after.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void strided_step(const ::cuda::std::array<index_t, Rank>& idx) const {
    strided_step_impl(idx, ::cuda::std::make_index_sequence<sizeof...(Targets)>{});
  }
  /// Elements idx, idx + 1, ..., idx + V - 1 along inner_axis() of every target, read first and stored after.
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void row_step(const ::cuda::std::array<index_t, Rank>& idx) const {
    row_step_impl<V, Aligned>(idx, ::cuda::std::make_index_sequence<sizeof...(Targets)>{});
  }
  /// The multi-index of the n-th element in memory order.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE ::cuda::std::array<index_t, Rank> index_of(index_t n) const {
    ::cuda::std::array<index_t, Rank> position{};  // by memory order: outermost first
    split_outer<int(Rank) - 1>(n, position);
    return by_axis(position);
  }
  /// The axis walked innermost: the destinations' fastest-moving one.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE int inner_axis() const { return axis_order[Rank - 1]; }
  /// Where row step s starts: rows run along inner_axis(), V elements a step, steps numbered in memory order
  /// (the inner extent a multiple of V: make_pass plans rows only then).
  template <int V>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE ::cuda::std::array<index_t, Rank> row_index_of(index_t s) const {
    const index_t steps_per_row = extent[inner_axis()] / V;
    const index_t row = s / steps_per_row;
    ::cuda::std::array<index_t, Rank> position{};  // by memory order: outermost first
    position[Rank - 1] = (s - row * steps_per_row) * V;
    split_outer<int(Rank) - 2>(row, position);
    return by_axis(position);
  }
  /// Advances `idx` to the next element in memory order.
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void advance(::cuda::std::array<index_t, Rank>& idx) const {
    for (int k = int(Rank) - 1; k >= 0; --k) {
      const int axis = axis_order[k];
      if (++idx[axis] < extent[axis]) return;
      idx[axis] = 0;
    }
  }

 private:
  // Positions [0, Last] in memory order of the n-th of the elements those axes span, a division per axis
  // but the outermost (n is below its extent).
  template <int Last>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void split_outer(index_t n, ::cuda::std::array<index_t, Rank>& position) const {
    FUSOR_UNROLL
    for (int k = Last; k > 0; --k) {
      const index_t e = extent[axis_order[k]];
      const index_t outer = n / e;
      position[k] = n - outer * e;
      n = outer;
    }
    if constexpr (Last >= 0) position[0] = n;
  }
  // The multi-index by axis of `position`, given by memory order (set_axis, not idx[axis_order[k]] = ...).
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE ::cuda::std::array<index_t, Rank> by_axis(
      const ::cuda::std::array<index_t, Rank>& position) const {
    ::cuda::std::array<index_t, Rank> idx{};
    FUSOR_UNROLL
    for (std::size_t k = 0; k != Rank; ++k) detail::set_axis(idx, axis_order[k], position[k]);
    return idx;
  }
  template <int V, bool Aligned, std::size_t... I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void row_step_impl(const ::cuda::std::array<index_t, Rank>& idx,
                                                          ::cuda::std::index_sequence<I...>) const {
    const int inner = inner_axis();
    const auto values = ::cuda::std::make_tuple(get<I>().expression.template load_row<V, Aligned>(idx, inner)...);
    (get<I>().destination.template store_row<V, Aligned>(idx, ::cuda::std::get<I>(values)), ...);
  }
  template <int V, bool Aligned, std::size_t... I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void linear_step_impl(index_t i, ::cuda::std::index_sequence<I...>) const {
    const auto values = ::cuda::std::make_tuple(get<I>().expression.template load<V, Aligned>(i)...);
    (get<I>().destination.template store<V, Aligned>(i, ::cuda::std::get<I>(values)), ...);
  }
  template <std::size_t... I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE void strided_step_impl(const ::cuda::std::array<index_t, Rank>& idx,
                                                              ::cuda::std::index_sequence<I...>) const {
    const auto values = ::cuda::std::make_tuple(get<I>().expression.at(idx)...);
    (get<I>().destination.store_at(idx, ::cuda::std::get<I>(values)), ...);
  }
};

/// How a pass will walk its elements.
struct pass_plan {
  bool linear = false;   ///< Every operand at the destinations' linear positions.
  /// Not linear, but every operand read V at a time along the destinations' innermost axis: consecutive
  /// there and 16-byte aligned at every row start, or broadcast along it (a bias row added to every row; a
  /// column repeated along each row).
  bool rows = false;
  bool aligned = false;  ///< Linear, and every pointer 16-byte aligned; always true with rows.
};

namespace detail {
// "[4, 4] (strides [4, 1])": an operand as the aliasing error names it.
template <class V>
std::string layout_text(const V& v) {
  std::string strides = "[";
  for (std::size_t k = 0; k != V::rank; ++k) strides += (k ? ", " : "") + std::to_string(v.stride(k));
  return shape_string(v.extents()) + " (strides " + strides + "])";
}
// Whether the bytes of view v's elements, [first, last), meet those of w.
template <class V, class W>
bool bytes_overlap(const V& v, const W& w) {
  const auto span = [](const auto& x) {
    using X = std::remove_cvref_t<decltype(x)>;
    index_t last = 0;
    for (std::size_t k = 0; k != X::rank; ++k) last += (x.extent(k) - 1) * x.stride(k);
    const auto* first = reinterpret_cast<const std::byte*>(x.data());
    return std::pair{first, first + (last + 1) * index_t(sizeof(typename X::element_type))};
  };
  if (v.size() == 0 || w.size() == 0) return false;
  const auto [v0, v1] = span(v);
  const auto [w0, w1] = span(w);
  return v0 < w1 && w0 < v1;
}
// A destination may be an operand of its own assignment only element for element (x = x * 2): each element
// read where it is stored. An operand that overlaps it otherwise (its transpose, a shifted slice, a row of it
// broadcast) would read elements already overwritten on the host and race with the stores on the GPU: refused.
// `what` names the destination in the error ("softmax's output").
template <class D, class E>
void check_alias(const D& destination, const E& e, const char* what = "an assignment's destination") {
  if constexpr (!is_view_v<D>) {
    return;  // a destination of its own kind (optim's master_and_parameters) keeps its own rules
  } else if constexpr (is_node_v<E>) {
    [&]<std::size_t... I>(::cuda::std::index_sequence<I...>) {
      (check_alias(destination, e.template child<I>(), what), ...);
    }(::cuda::std::make_index_sequence<E::arity>{});
  } else if constexpr (is_view_v<E> && E::rank <= D::rank) {  // rank 0 too: one element broadcast
    if (!bytes_overlap(destination, e)) return;
    constexpr std::size_t lead = D::rank - E::rank;  // the operand's missing leading axes broadcast
    bool same = sizeof(typename E::element_type) == sizeof(typename D::element_type) &&
                static_cast<const void*>(e.data()) == static_cast<const void*>(destination.data());
    for (std::size_t r = 0; r != D::rank && same; ++r) {
      const bool missing = r + 1 <= lead;  // (not r < lead: nvcc warns of the comparison where lead is 0)
      const index_t read = missing || e.extent(r - lead) == 1 ? 0 : e.stride(r - lead);
      same = destination.extent(r) == 1 || read == destination.stride(r);
    }
    if (!same)
      throw error("fusor: " + std::string(what) + " " + layout_text(destination) + " overlaps an operand " +
                  layout_text(e) + " that reads other elements of the same memory (a transpose, a shifted slice or "
                  "a broadcast part of it): elements would be read after they were overwritten. Assign into "
                  "another tensor first");
  }
}
}  // namespace detail

/// Checks shapes (throwing shape_error with both shapes), and builds the pass
/// and its plan. Static shape mismatches fail to compile.
template <class First, class... Rest>
auto make_pass(const First& first, const Rest&... rest) {
  using D = typename First::destination_type;
  constexpr std::size_t rank = D::rank;
  static_assert(((Rest::destination_type::rank == rank) && ...),
                "fusor: all destinations of one assignment must have the same rank");
  static_assert(!detail::has_placeholder_v<typename First::expression_type> &&
                    (!detail::has_placeholder_v<typename Rest::expression_type> && ...),
                "fusor: this expression still has placeholders (arg<N>); substitute() operands for them first");
  const D& d = first.destination;
  auto check_target = [&](const auto& t) {
    for (std::size_t r = 0; r != rank; ++r)
      if (t.destination.extent(r) != d.extent(r))
        detail::throw_destinations_differ(shape_string(d.extents()), shape_string(t.destination.extents()));
    check_fits(t.destination.extents(), t.expression.extents());
  };
  check_target(first);
  (check_target(rest), ...);
  // Every destination against every operand of every target.
  const auto check_aliases_of = [&](const auto& dst) {
    detail::check_alias(dst.destination, first.expression);
    (detail::check_alias(dst.destination, rest.expression), ...);
  };
  check_aliases_of(first);
  (check_aliases_of(rest), ...);

  pass<rank, First, Rest...> p{{{first}, {rest}...}, d.size(), {}, {}};
  const dense_shape<rank> layout = d.shape_and_strides();
  for (std::size_t r = 0; r != rank; ++r) {
    p.axis_order[r] = int(r);
    p.extent[r] = layout.extent[r];
  }
  // Outermost axis first: decreasing stride, ties (size-1 axes) in index order. A stable insertion sort of at
  // most 8 axes (std::stable_sort with this lambda would be compiled again for every expression type).
  if constexpr (rank > 1)  // (a loop bound of 0 or 1 draws nvcc's "pointless comparison" warning)
    for (std::size_t i = 1; i < rank; ++i)
      for (std::size_t j = i; j > 0 && layout.stride[p.axis_order[j - 1]] < layout.stride[p.axis_order[j]]; --j) {
        const int outer = p.axis_order[j];
        p.axis_order[j] = p.axis_order[j - 1];
        p.axis_order[j - 1] = outer;
      }

  pass_plan plan;
  auto linear_target = [&](const auto& t) {
    return t.destination.is_contiguous() && t.destination.linear_with(layout) && t.expression.linear_with(layout);
  };
  plan.linear = linear_target(first) && (linear_target(rest) && ...);
  auto aligned_target = [](const auto& t) { return t.destination.aligned16() && t.expression.aligned16(); };
  plan.aligned = plan.linear && aligned_target(first) && (aligned_target(rest) && ...);
  if constexpr (decltype(p)::row_capable) {
    // Rows along the innermost axis, V elements a step and a whole number of steps a row: a broadcast
    // operand costs one multi-index per V elements instead of one per element, and the loads are vectors.
    constexpr int V = decltype(p)::device_lanes;
    const int inner = p.inner_axis();
    auto row_target = [&](const auto& t) {
      return t.destination.stride(std::size_t(inner)) == 1 && t.expression.template rows_along<rank>(inner);
    };
    auto row_aligned = [&](const auto& t) {
      return t.destination.template rows_aligned16<rank>(inner) && t.expression.template rows_aligned16<rank>(inner);
    };
    // Unaligned rows (a slice starting mid-vector) stay strided: a kernel fewer for every broadcast pass.
    if (!plan.linear && V > 1 && p.extent[std::size_t(inner)] % V == 0 && row_target(first) &&
        (row_target(rest) && ...) && row_aligned(first) && (row_aligned(rest) && ...)) {
      plan.rows = true;
      plan.aligned = true;
    }
  }
  return std::pair{p, plan};
}

}  // namespace fusor
