// fusor/expr/node.hpp — the expression tree: leaves (views, literal scalars,
// placeholders) and one node type that applies an operation to its children.
//
// Nodes hold their children by value, so `auto e = a * exp(b);` can be kept and
// reused, and every node is trivially copyable so the whole tree travels to a
// kernel as one parameter. Values are computed in the operands' common compute
// type (bf16 and fp16 storage compute in fp32); a literal scalar is "weak": it
// takes the type of what it meets, so `x * 2.0` stays in float for float x
// (an integer x met by a floating-point literal computes in float: `i * 1.5`).
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <cuda/std/array>
#include <cuda/std/tuple>
#include <cuda/std/type_traits>
#include <cuda/std/utility>

#include "fusor/config.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/vector_access.hpp"
#include "fusor/core/view.hpp"

namespace fusor {

/// Anything that can sit in an expression tree.
template <class T>
concept expression = requires {
  typename T::value_type;
  typename T::extents_type;
  { T::weak } -> std::convertible_to<bool>;
  { T::narrowest_element } -> std::convertible_to<std::size_t>;
};

namespace detail {
// Whether expression E can be read row by row (pass.hpp's row path): views, literals, and nodes whose children
// all can; a leaf without load_row sends its passes down the strided path.
template <class E, std::size_t R>
concept row_readable = requires(const E& e) { e.template rows_along<R>(0); };
}  // namespace detail

// ---- literal scalars ------------------------------------------------------------
/// A scalar of type `T` as an expression leaf, the same at every position; weak: it takes the type of what it
/// meets.
template <class T>
struct literal {
  using value_type = T;  ///< The scalar's type.
  using extents_type = ::cuda::std::extents<index_t>;  ///< Rank 0: it broadcasts to any shape.
  static constexpr std::size_t rank = 0;  ///< No axes.
  static constexpr bool weak = true;  ///< Takes the type of what it meets.
  static constexpr std::size_t narrowest_element = 16;  ///< 16: never narrows the vector width.

  T value;  ///< The scalar.

  /// The empty shape.
  FUSOR_HOST_DEVICE extents_type extents() const { return {}; }
  /// The value, at any multi-index.
  template <std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE T at(const ::cuda::std::array<index_t, R>&) const { return value; }
  /// V copies of the value, at any linear position.
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<T, V> load(index_t) const {
    lanes<T, V> out;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) out[j] = value;
    return out;
  }
  /// True: a scalar can be read at any linear position.
  template <std::size_t R>
  bool linear_with(const dense_shape<R>&) const { return true; }
  /// True: a scalar reads no memory.
  bool aligned16() const { return true; }
  /// V copies of the value, along any axis.
  template <int V, bool Aligned, std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<T, V> load_row(const ::cuda::std::array<index_t, R>&, int) const {
    return load<V, Aligned>(0);
  }
  /// True: a scalar is the same along every axis.
  template <std::size_t R>
  bool rows_along(int) const { return true; }
  /// True: a scalar reads no memory.
  template <std::size_t R>
  bool rows_aligned16(int) const { return true; }
};

/// A constant known at compile time (the zeros and ones of derivatives): a
/// literal whose type says its value, so derivatives can simplify by type.
template <int N>
struct constant : literal<int> {
  /// The literal N.
  FUSOR_HOST_DEVICE constexpr constant() : literal<int>{N} {}
};
using zero = constant<0>;  ///< The constant 0.
using one = constant<1>;   ///< The constant 1.

// ---- placeholders: named inputs of a symbolic expression ------------------------
// They stand for operands given later (substitute), which is what lets fusor
// differentiate an expression before it knows what it will be applied to.
/// The value type of a placeholder, and of any expression that still has one.
struct unbound {};

/// Placeholder `I`: input number `I` of a symbolic expression, replaced by substitute().
template <std::size_t I>
struct placeholder {
  using value_type = unbound;  ///< No value until substituted.
  using extents_type = ::cuda::std::extents<index_t>;  ///< Rank 0 until substituted.
  static constexpr std::size_t rank = 0;  ///< No axes until substituted.
  static constexpr bool weak = false;  ///< Not weak.
  static constexpr std::size_t narrowest_element = 16;  ///< 16: never narrows the vector width.
  static constexpr std::size_t index = I;  ///< Which input it stands for.
  /// The empty shape.
  FUSOR_HOST_DEVICE extents_type extents() const { return {}; }
};
/// `arg<I>`: placeholder `I`, to write symbolic expressions such as `arg<0> * arg<1>`.
template <std::size_t I>
inline constexpr placeholder<I> arg{};

// ---- type promotion -------------------------------------------------------------
namespace detail {
template <class... T>
struct common_or_void { using type = void; };
template <class T, class... Rest>
struct common_or_void<T, Rest...> { using type = ::cuda::std::common_type_t<T, Rest...>; };

template <class... Acc>
struct type_list {};
template <class List, class T, bool Keep>
struct push;
template <class... Acc, class T>
struct push<type_list<Acc...>, T, true> { using type = type_list<Acc..., T>; };
template <class... Acc, class T>
struct push<type_list<Acc...>, T, false> { using type = type_list<Acc...>; };

template <class List, class... E>
struct filter { using type = List; };
template <class List, class E, class... Rest>
struct filter<List, E, Rest...> {
  using value = typename E::value_type;
  static constexpr bool keep = !E::weak && !std::is_same_v<value, bool>;
  using type = typename filter<typename push<List, value, keep>::type, Rest...>::type;
};
template <class List, class... E>
struct filter_weak { using type = List; };
template <class List, class E, class... Rest>
struct filter_weak<List, E, Rest...> {
  using value = typename E::value_type;
  static constexpr bool keep = !std::is_same_v<value, bool>;
  using type = typename filter_weak<typename push<List, value, keep>::type, Rest...>::type;
};
template <class List>
struct common_of_list;
template <class... T>
struct common_of_list<type_list<T...>> { using type = typename common_or_void<T...>::type; };

// An integer operand met by a floating-point literal would truncate it (2.5 to 2):
// the two compute in float instead, as PyTorch's integer tensors do with a float scalar.
template <class... E>
inline constexpr bool any_floating_literal = ((E::weak && std::is_floating_point_v<typename E::value_type>) || ...);
template <class Strong, class... E>
using integer_met_by_floating_t =
    std::conditional_t<std::is_integral_v<Strong> && any_floating_literal<E...>, float, Strong>;

template <bool AnyUnbound, class... E>
struct promote_bound {
  using strong = typename common_of_list<typename filter<type_list<>, E...>::type>::type;
  using all = typename common_of_list<typename filter_weak<type_list<>, E...>::type>::type;
  using type = std::conditional_t<!std::is_void_v<strong>, integer_met_by_floating_t<strong, E...>,
                                  std::conditional_t<!std::is_void_v<all>, all, bool>>;
};
template <class... E>
struct promote_bound<true, E...> { using type = unbound; };
template <class... E>
struct promote {
  using type = typename promote_bound<(std::is_same_v<typename E::value_type, unbound> || ...), E...>::type;
};

// A function of real numbers (an operation marked `floating`: exp, tanh, sqrt, ...) computes an integer or
// boolean operand in float.
template <class Op, class = void>
struct floating_operation : std::false_type {};
template <class Op>
struct floating_operation<Op, std::void_t<decltype(Op::floating)>> : std::bool_constant<Op::floating> {};
template <class Op, class Compute>
struct operation_compute {
  using type = std::conditional_t<floating_operation<Op>::value && std::is_integral_v<Compute>, float, Compute>;
};

// Every child's value reaches the operation in the compute type: a comparison
// met by arithmetic counts as 0 or 1 (x * (x > 0)), a condition is true when nonzero.
template <class Op, class Compute, class... E>
struct result {
  using type = decltype(Op{}((void(std::declval<E>()), std::declval<Compute>())...));
};
template <class Op, class... E>
struct result<Op, unbound, E...> { using type = unbound; };

template <class... E>
struct broadcast_all;
template <class E>
struct broadcast_all<E> { using type = E; };
template <class A, class B, class... Rest>
struct broadcast_all<A, B, Rest...> { using type = typename broadcast_all<broadcast_extents_t<A, B>, Rest...>::type; };

template <class E>
E broadcast_shapes(const E& e) {
  return e;
}
template <class A, class B, class... Rest>
auto broadcast_shapes(const A& a, const B& b, const Rest&... rest) {
  return broadcast_shapes(broadcast(a, b), rest...);
}

constexpr std::size_t min_size(std::initializer_list<std::size_t> sizes) {
  std::size_t m = 16;
  for (std::size_t s : sizes) m = s < m ? s : m;
  return m;
}

// Children stored as an aggregate (not a tuple) so the node stays trivially copyable.
template <std::size_t I, class T>
struct slot {
  T value;
};
template <class Seq, class... T>
struct packed_impl;
template <std::size_t... I, class... T>
struct packed_impl<::cuda::std::index_sequence<I...>, T...> : slot<I, T>... {};
template <class... T>
using packed = packed_impl<::cuda::std::make_index_sequence<sizeof...(T)>, T...>;
template <std::size_t I, class T>
FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE constexpr const T& get(const slot<I, T>& s) { return s.value; }
}  // namespace detail

/// The common compute type of expressions `E...`: weak literals and comparisons give way to the others' type;
/// unbound if any is a placeholder.
template <class... E>
using promote_t = typename detail::promote<E...>::type;

// ---- the node -------------------------------------------------------------------
/// Operation `Op` applied elementwise to child expressions `Args...`, their shapes broadcast; children are
/// held by value and the node is trivially copyable. Built by make_node and the operators.
template <class Op, class... Args>
struct node {
  using operation = Op;  ///< The functor applied to the children's values.
  /// The type every child's value is converted to before `Op` (float for a function of real numbers of integers).
  using compute_type = typename detail::operation_compute<Op, promote_t<Args...>>::type;
  using value_type = typename detail::result<Op, compute_type, Args...>::type;  ///< What `Op` returns.
  using extents_type = typename detail::broadcast_all<typename Args::extents_type...>::type;  ///< The broadcast shape.
  static constexpr std::size_t rank = extents_type::rank();  ///< The number of axes.
  static constexpr bool weak = (Args::weak && ...);  ///< Weak when every child is (literals only).
  /// Bytes of the narrowest element any child reads: it limits the vector width.
  static constexpr std::size_t narrowest_element = detail::min_size({Args::narrowest_element...});
  static constexpr std::size_t arity = sizeof...(Args);  ///< The number of children.

  detail::packed<Args...> children;  ///< The children, by value; read them with child().
  extents_type shape;  ///< The broadcast shape of the children.

  /// Child `I`.
  template <std::size_t I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE const auto& child() const { return detail::get<I>(children); }
  /// The broadcast shape.
  FUSOR_HOST_DEVICE const extents_type& extents() const { return shape; }

  /// The value at output multi-index `idx` (rank R >= rank): `Op` of the children's values there.
  template <std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE value_type at(const ::cuda::std::array<index_t, R>& idx) const {
    return at_impl(idx, ::cuda::std::make_index_sequence<arity>{});
  }
  /// The values at linear positions [i, i + V); `Aligned` promises every operand 16-byte aligned.
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load(index_t i) const {
    return load_impl<V, Aligned>(i, ::cuda::std::make_index_sequence<arity>{});
  }
  /// Whether every child can be read at the destination's linear positions.
  template <std::size_t R>
  bool linear_with(const dense_shape<R>& dst) const {
    return linear_impl(dst, ::cuda::std::make_index_sequence<arity>{});
  }
  /// Whether every child's memory is 16-byte aligned.
  bool aligned16() const { return aligned_impl(::cuda::std::make_index_sequence<arity>{}); }
  /// The values at idx, idx + 1, ..., along output axis `inner`: `Op` of the children's rows.
  template <int V, bool Aligned, std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load_row(const ::cuda::std::array<index_t, R>& idx,
                                                                     int inner) const {
    return load_row_impl<V, Aligned>(idx, inner, ::cuda::std::make_index_sequence<arity>{});
  }
  /// Whether every child can be read V at a time along output axis `inner` (see view::rows_along).
  template <std::size_t R>
    requires(detail::row_readable<Args, R> && ...)
  bool rows_along(int inner) const {
    return rows_along_impl<R>(inner, ::cuda::std::make_index_sequence<arity>{});
  }
  /// Whether every child's rows along output axis `inner` start 16-byte aligned.
  template <std::size_t R>
  bool rows_aligned16(int inner) const {
    return rows_aligned_impl<R>(inner, ::cuda::std::make_index_sequence<arity>{});
  }

 private:
  template <std::size_t I>
  using child_t = ::cuda::std::tuple_element_t<I, ::cuda::std::tuple<Args...>>;
  template <std::size_t I, class T>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE static compute_type as_argument(const T& v) {
    return convert<compute_type>(v);
  }
  template <std::size_t R, std::size_t... I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE value_type at_impl(const ::cuda::std::array<index_t, R>& idx,
                                                          ::cuda::std::index_sequence<I...>) const {
    return Op{}(as_argument<I>(child<I>().at(idx))...);
  }
  template <int V, bool Aligned, std::size_t... I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load_impl(index_t i, ::cuda::std::index_sequence<I...>) const {
    // The children's lanes as separate arguments, not a tuple: GCC does not
    // vectorise through a tuple of lanes of mixed widths (a comparison's bool
    // next to floats), which made where(x > 0, ...) ~10x slower than relu(x).
    return apply_lanes<V>(child<I>().template load<V, Aligned>(i)...);
  }
  template <int V, class... L>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE static lanes<value_type, V> apply_lanes(const L&... inputs) {
    lanes<value_type, V> out;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) out[j] = Op{}(convert<compute_type>(inputs[j])...);
    return out;
  }
  template <std::size_t R, std::size_t... I>
  bool linear_impl(const dense_shape<R>& dst, ::cuda::std::index_sequence<I...>) const {
    return (child<I>().linear_with(dst) && ...);
  }
  template <std::size_t... I>
  bool aligned_impl(::cuda::std::index_sequence<I...>) const {
    return (child<I>().aligned16() && ...);
  }
  template <int V, bool Aligned, std::size_t R, std::size_t... I>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load_row_impl(const ::cuda::std::array<index_t, R>& idx,
                                                                          int inner,
                                                                          ::cuda::std::index_sequence<I...>) const {
    return apply_lanes<V>(child<I>().template load_row<V, Aligned>(idx, inner)...);
  }
  template <std::size_t R, std::size_t... I>
  bool rows_along_impl(int inner, ::cuda::std::index_sequence<I...>) const {
    return (child<I>().template rows_along<R>(inner) && ...);
  }
  template <std::size_t R, std::size_t... I>
  bool rows_aligned_impl(int inner, ::cuda::std::index_sequence<I...>) const {
    return (child<I>().template rows_aligned16<R>(inner) && ...);
  }
};

/// Whether `T` is a node.
template <class T>
inline constexpr bool is_node_v = false;
/// True for every node.
template <class Op, class... A>
inline constexpr bool is_node_v<node<Op, A...>> = true;

// ---- building trees -------------------------------------------------------------
/// What a user may write as an operand: an expression, an lvalue tensor (it
/// becomes its view) or an arithmetic scalar (it becomes a weak literal).
template <class T>
concept operand = expression<std::remove_cvref_t<T>> || is_tensor_v<std::remove_cvref_t<T>> ||
                  std::is_arithmetic_v<std::remove_cvref_t<T>>;
/// An operand that is part of a tree: an expression or a tensor, not a plain scalar.
template <class T>
concept tree_operand = expression<std::remove_cvref_t<T>> || is_tensor_v<std::remove_cvref_t<T>>;

namespace detail {
// x as an expression, unchecked: as_expression without its lvalue check.
template <class T>
auto to_expression(T&& x) {
  using U = std::remove_cvref_t<T>;
  if constexpr (is_tensor_v<U>) return x.view();
  else if constexpr (std::is_arithmetic_v<U>) return literal<U>{x};
  else return U(x);
}
// The shape type of what operand T becomes.
template <class T, bool Scalar = std::is_arithmetic_v<std::remove_cvref_t<T>>>
struct operand_extents {
  using type = typename std::remove_cvref_t<T>::extents_type;
};
template <class T>
struct operand_extents<T, true> {
  using type = ::cuda::std::extents<index_t>;
};
// Whether T is a tensor passed as a temporary (its memory would go with it).
template <class T>
inline constexpr bool temporary_tensor_v = is_tensor_v<std::remove_cvref_t<T>> && !std::is_lvalue_reference_v<T>;
}  // namespace detail

/// The message of an operand that is a temporary tensor (one string literal, for static_assert).
#define FUSOR_TEMPORARY_TENSOR_MESSAGE                                                                         \
  "fusor: a temporary tensor cannot be an operand: the expression would outlive its memory; keep the tensor in " \
  "a variable and use the variable"

/// `x` as an expression: an lvalue tensor becomes its view, an arithmetic scalar a weak literal, and an
/// expression is copied.
template <class T>
auto as_expression(T&& x) {
  static_assert(!detail::temporary_tensor_v<T>, FUSOR_TEMPORARY_TENSOR_MESSAGE);
  return detail::to_expression(std::forward<T>(x));
}

/// Builds node<Op, ...> from operands, checking shapes (static ones at compile
/// time; dynamic ones here, before anything runs) and that the node can be a
/// kernel parameter.
template <class Op, class... E>
node<Op, E...> make_node_from(const E&... children) {
  static_assert(std::is_trivially_copyable_v<node<Op, E...>>,
                "fusor: expression nodes must be trivially copyable to be passed to a kernel");
  if constexpr (requires { Op::spelling; }) {
    try {
      return {{{children}...}, detail::broadcast_shapes(children.extents()...)};
    } catch (const shape_error& e) {  // which operation of a long expression: its functor's name
      throw shape_error(std::string(e.what()) + ", the operands of " + Op::spelling);
    }
  } else {
    return {{{children}...}, detail::broadcast_shapes(children.extents()...)};
  }
}
/// node<Op, ...> of the operands, each made an expression by as_expression; checks shapes as make_node_from.
///
/// Every operator and function of fusor/expr/operators.hpp calls it directly, so its static_asserts are the
/// first a misuse meets (no temporary tensor, static shapes that broadcast); where one fails, nothing deeper is
/// instantiated (one error, not a cascade) and a node of the operands' types stands for the result.
template <class Op, class... T>
auto make_node(T&&... operands) {
  static_assert((!detail::temporary_tensor_v<T> && ...), FUSOR_TEMPORARY_TENSOR_MESSAGE);
  using shapes = static_broadcast_check_all<typename detail::operand_extents<T>::type...>;
  static_assert(shapes::value, FUSOR_STATIC_BROADCAST_MESSAGE);
  if constexpr ((!detail::temporary_tensor_v<T> && ...) && shapes::value) {
    return make_node_from<Op>(as_expression(std::forward<T>(operands))...);
  } else {
    using result = node<Op, decltype(detail::to_expression(std::forward<T>(operands)))...>;
    return result{{{detail::to_expression(std::forward<T>(operands))}...}, {}};
  }
}

}  // namespace fusor
