// fusor/kernels/matmul_epilogue.hpp — what a matmul does to its product before
// storing it, so that a Linear layer's forward and backward need no separate
// elementwise kernel. In fusor's terms, with c[i, j] = sum_k a[i, k] b[k, j]:
//
//   epilogue::bias(bias)                      c = a b + bias[j]                    (cuBLASLt BIAS)
//   epilogue::relu([bias [, mask]])           c = relu(a b [+ bias[j]])            (RELU[_AUX][_BIAS])
//   epilogue::gelu_tanh([bias [, pre]])       c = gelu_tanh(a b [+ bias[j]])       (GELU[_AUX][_BIAS])
//       mask / pre: what backward needs, the relu bit mask or the pre-activation
//       (epilogue::no_bias in the bias's place when there is none)
//   epilogue::relu_backward(mask [, db])      c = a b where the mask is set, else 0;  (DRELU[_BGRAD])
//                                             db[j] = sum_i c[i, j]
//   epilogue::gelu_tanh_backward(pre [, db])  c = a b * gelu_tanh'(pre),             (DGELU[_BGRAD])
//                                             db[j] = sum_i c[i, j]
//   epilogue::bias_gradient_a(db)             c = a b, db[i] = sum_k a[i, k]        (BGRADA/BGRADB)
//   epilogue::bias_gradient_b(db)             c = a b, db[j] = sum_k b[k, j]
//   epilogue::expression(f)                   c = f(c): any fusor expression, one more pass
//
// GELU here is the tanh approximation (fusor::gelu_tanh): it is what cuBLASLt's
// epilogues compute, and the host computes the same. Bias, pre-activation and
// bias gradients have c's element type (cuBLASLt's rule); the fused forms need
// c's rows contiguous (unit stride along its last axis), and a pre-activation
// (gelu_tanh's `pre`, gelu_tanh_backward's) contiguous rows whose stride is a
// multiple of 8 elements (cuBLASLt's rule, kept on the host so that a program
// runs on both): for a width not a multiple of 8, a slice of a wider tensor
// (slice<1>(pre_storage.view(), 0, n) of an [m, round_up(n, 8)] one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include <cuda/std/cmath>

#include "fusor/core/buffer.hpp"
#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/core/view.hpp"
#include "fusor/expr/functors.hpp"
#include "fusor/kernels/matmul_layout.hpp"

namespace fusor {

/// Which elements of a relu's pre-activation were positive, one bit each, in
/// the geometry cuBLASLt's RELU_AUX epilogues use: row r of c (r counting over
/// the batch too) starts at bit r * row_bits(), row_bits() being cols rounded up
/// to 128. The host executor writes bit r * row_bits() + j for element j (what
/// test() reads); on the GPU the bits are cuBLASLt's. A mask is read by the
/// executor that wrote it; bytes() lets it be copied between spaces.
template <class Space = host_space>
class relu_mask {
 public:
  using space = Space;  ///< The memory space of the bits.
  /// An empty mask, for no matmul result.
  relu_mask() = default;
  /// A mask for a matmul result of this shape ([M, N] or [batch, M, N]).
  template <class Extents>
    requires is_extents_v<Extents>
  explicit relu_mask(const Extents& shape_of_c, stream_t stream = {}) {
    static_assert(Extents::rank() == 2 || Extents::rank() == 3, "fusor: a relu mask is for a 2-D or 3-D matmul result");
    batch_ = Extents::rank() == 3 ? shape_of_c.extent(0) : 1;
    rows_ = shape_of_c.extent(Extents::rank() - 2);
    cols_ = shape_of_c.extent(Extents::rank() - 1);
    row_bits_ = (cols_ + 127) / 128 * 128;
    bits_ = buffer<Space>(size_bytes(), stream);
    // Zeroed once: the bits past cols in each row are never written (cuBLASLt
    // leaves them), and copying bytes() must not read undefined memory.
    if (size_bytes() == 0) return;
    if constexpr (Space::host_accessible && !Space::device_accessible) {
      std::memset(data(), 0, size_bytes());
    } else {
#if FUSOR_HAS_CUDA
      FUSOR_CUDA_CHECK(cudaMemsetAsync(data(), 0, size_bytes(), stream));
#endif
    }
  }

  index_t batch() const { return batch_; }  ///< Matrices in the result (1 for a 2-D one).
  index_t rows() const { return rows_; }  ///< Rows (M) of each matrix.
  index_t cols() const { return cols_; }  ///< Columns (N) of each matrix.
  index_t row_bits() const { return row_bits_; }  ///< Bits per row: cols() rounded up to 128.
  /// The first byte of the bits (nullptr for an empty mask).
  std::uint8_t* data() const { return bits_.template as<std::uint8_t>(); }
  /// The size of the bits in bytes: batch() * rows() * row_bits() / 8.
  std::size_t size_bytes() const { return static_cast<std::size_t>(batch_ * rows_ * row_bits_ / 8); }
  /// The bits as a 1-D byte view, to copy a mask between spaces.
  view<std::uint8_t, dextents<index_t, 1>, row_major, Space> bytes() const {
    return {data(), static_cast<index_t>(size_bytes())};
  }
  /// Whether c[batch, i, j]'s pre-activation was positive (host-readable masks only).
  bool test(index_t batch, index_t i, index_t j) const {
    static_assert(Space::host_accessible, "fusor: read a device relu mask after copying bytes() to the host");
    const index_t bit = (batch * rows_ + i) * row_bits_ + j;
    return (data()[bit / 8] >> (bit % 8)) & 1;
  }

 private:
  buffer<Space> bits_;
  index_t batch_ = 0, rows_ = 0, cols_ = 0, row_bits_ = 0;
};

namespace detail {
enum class epilogue_op { bias, relu, gelu_tanh, relu_backward, gelu_tanh_backward, bias_gradient_a, bias_gradient_b };
struct absent {};

// A relu mask as an epilogue holds it: no ownership.
template <class Space>
struct relu_mask_ref {
  using space = Space;
  std::uint8_t* bits;
  index_t batch, rows, cols, row_bits;
};

template <class T>
inline constexpr bool is_relu_mask_ref_v = false;
template <class S>
inline constexpr bool is_relu_mask_ref_v<relu_mask_ref<S>> = true;

// Bias, pre-activation and bias-gradient operands: views, or lvalue tensors.
template <class T>
auto epilogue_view(T&& x) {
  using U = std::remove_cvref_t<T>;
  static_assert(is_view_v<U> || is_tensor_v<U>,
                "fusor: a matmul epilogue's bias, pre-activation and bias gradient must be views or tensors");
  static_assert(!is_tensor_v<U> || std::is_lvalue_reference_v<T>,
                "fusor: a temporary tensor cannot be a matmul epilogue operand: the epilogue would outlive its memory");
  if constexpr (is_tensor_v<U>) return x.view();
  else return U(x);
}
template <class S>
relu_mask_ref<S> mask_ref(const relu_mask<S>& m) {
  return {m.data(), m.batch(), m.rows(), m.cols(), m.row_bits()};
}

// gelu_tanh and its derivative through s = sigmoid(2u) = (1 + tanh u) / 2, with
// u = k (x + c x^3): no cancellation where x is very negative and 1 + tanh u
// would lose every digit. gelu_tanh(x) = x s; its derivative is
// s + x k (1 + 3 c x^2) 2 s (1 - s).
template <class T>
FUSOR_HOST_DEVICE inline T gelu_tanh_sigmoid(T x) {
  return ops::detail::sigmoid_of(T(2) * ops::detail::gelu_tanh_inner(x));
}
template <class T>
FUSOR_HOST_DEVICE inline T gelu_tanh_value(T x) {
  return x * gelu_tanh_sigmoid(x);
}
template <class T>
FUSOR_HOST_DEVICE inline T gelu_tanh_derivative(T x) {
  const T s = gelu_tanh_sigmoid(x);
  return s + x * T(ops::detail::gelu_tanh_k) * (T(1) + T(3 * ops::detail::gelu_tanh_c) * x * x) * T(2) * s * (T(1) - s);
}
}  // namespace detail

/// A fused epilogue: the operation and its operands (views, a mask, or absent).
///
/// Made by the functions of namespace epilogue (epilogue::bias, epilogue::relu, ...), not directly.
template <detail::epilogue_op Op, class Bias = detail::absent, class Aux = detail::absent,
          class Gradient = detail::absent>
struct fused_epilogue {
  static constexpr detail::epilogue_op op = Op;  ///< The operation.
  static constexpr bool has_bias = !std::is_same_v<Bias, detail::absent>;  ///< Whether a bias is added.
  /// Whether there is an auxiliary operand: a relu mask or pre-activation, written forward, read backward.
  static constexpr bool has_aux = !std::is_same_v<Aux, detail::absent>;
  /// Whether a bias gradient is formed.
  static constexpr bool has_gradient = !std::is_same_v<Gradient, detail::absent>;
  /// Whether the operation is relu_backward or gelu_tanh_backward.
  static constexpr bool backward = Op == detail::epilogue_op::relu_backward || Op == detail::epilogue_op::gelu_tanh_backward;
  /// Whether the operation is relu or relu_backward (whose auxiliary operand is a relu_mask).
  static constexpr bool relu_like = Op == detail::epilogue_op::relu || Op == detail::epilogue_op::relu_backward;
  /// Whether the bias gradient sums an input, not c: db[i] = sum_k a[i, k] (bias_gradient_a) or
  /// db[j] = sum_k b[k, j] (bias_gradient_b).
  static constexpr bool input_gradient = Op == detail::epilogue_op::bias_gradient_a || Op == detail::epilogue_op::bias_gradient_b;
  using bias_type = Bias;  ///< The bias's view type, or detail::absent.
  using aux_type = Aux;  ///< The mask's or pre-activation's type, or detail::absent.
  using gradient_type = Gradient;  ///< The bias gradient's view type, or detail::absent.
  Bias bias{};  ///< The bias, one value per column of c.
  Aux aux{};  ///< The relu mask or the pre-activation (c's shape).
  Gradient gradient{};  ///< The bias gradient, overwritten by the matmul.
};

namespace epilogue {
/// No epilogue: c = a b.
struct none {};
/// The type of no_bias.
struct no_bias_t {};
/// In the bias's place where an epilogue records a mask or pre-activation without a bias.
inline constexpr no_bias_t no_bias{};

/// The epilogue made by epilogue::expression: c = f(product).
template <class F>
struct expression_t {
  F function;  ///< f: takes the product as an expression, returns the expression stored in c.
};
/// c = f(product) after the GEMM, in one elementwise pass: f takes the product as
/// an expression and returns any fusor expression, e.g.
/// `[&](auto y) { return silu(y) + residual; }`. Write it generic (auto): the GPU
/// hands it c, the host hands bf16/fp16 products over in fp32, before rounding.
template <class F>
expression_t<std::decay_t<F>> expression(F&& f) {
  return {std::forward<F>(f)};
}

using op = detail::epilogue_op;  ///< The fused operations.

/// c = a b + bias[j].
template <class Bias>
auto bias(Bias&& b) {
  auto v = detail::epilogue_view(std::forward<Bias>(b));
  return fused_epilogue<op::bias, decltype(v)>{v};
}

/// c = relu(a b).
inline auto relu() { return fused_epilogue<op::relu>{}; }
/// c = relu(a b + bias[j]).
template <class Bias>
auto relu(Bias&& b) {
  auto v = detail::epilogue_view(std::forward<Bias>(b));
  return fused_epilogue<op::relu, decltype(v)>{v};
}
/// c = relu(a b + bias[j]), recording in `mask` which elements were positive, for relu_backward.
template <class Bias, class S>
auto relu(Bias&& b, const relu_mask<S>& mask) {
  auto v = detail::epilogue_view(std::forward<Bias>(b));
  return fused_epilogue<op::relu, decltype(v), detail::relu_mask_ref<S>>{v, detail::mask_ref(mask)};
}
/// c = relu(a b), recording in `mask` which elements were positive, for relu_backward.
template <class S>
auto relu(no_bias_t, const relu_mask<S>& mask) {
  return fused_epilogue<op::relu, detail::absent, detail::relu_mask_ref<S>>{{}, detail::mask_ref(mask)};
}

/// c = gelu_tanh(a b).
inline auto gelu_tanh() { return fused_epilogue<op::gelu_tanh>{}; }
/// c = gelu_tanh(a b + bias[j]).
template <class Bias>
auto gelu_tanh(Bias&& b) {
  auto v = detail::epilogue_view(std::forward<Bias>(b));
  return fused_epilogue<op::gelu_tanh, decltype(v)>{v};
}
/// c = gelu_tanh(a b + bias[j]), storing the pre-activation a b + bias[j] for gelu_tanh_backward.
template <class Bias, class Pre>
auto gelu_tanh(Bias&& b, Pre&& pre_activation) {
  auto v = detail::epilogue_view(std::forward<Bias>(b));
  auto p = detail::epilogue_view(std::forward<Pre>(pre_activation));
  return fused_epilogue<op::gelu_tanh, decltype(v), decltype(p)>{v, p};
}
/// c = gelu_tanh(a b), storing the pre-activation a b for gelu_tanh_backward.
template <class Pre>
auto gelu_tanh(no_bias_t, Pre&& pre_activation) {
  auto p = detail::epilogue_view(std::forward<Pre>(pre_activation));
  return fused_epilogue<op::gelu_tanh, detail::absent, decltype(p)>{{}, p};
}

/// c = a b where the forward's `mask` is set, else 0.
template <class S>
auto relu_backward(const relu_mask<S>& mask) {
  return fused_epilogue<op::relu_backward, detail::absent, detail::relu_mask_ref<S>>{{}, detail::mask_ref(mask)};
}
/// c = a b where the forward's `mask` is set, else 0; bias_gradient[j] = sum over i of c[i, j].
template <class S, class Gradient>
auto relu_backward(const relu_mask<S>& mask, Gradient&& bias_gradient) {
  auto g = detail::epilogue_view(std::forward<Gradient>(bias_gradient));
  return fused_epilogue<op::relu_backward, detail::absent, detail::relu_mask_ref<S>, decltype(g)>{
      {}, detail::mask_ref(mask), g};
}
/// c = a b * gelu_tanh'(pre_activation).
template <class Pre>
auto gelu_tanh_backward(Pre&& pre_activation) {
  auto p = detail::epilogue_view(std::forward<Pre>(pre_activation));
  return fused_epilogue<op::gelu_tanh_backward, detail::absent, decltype(p)>{{}, p};
}
/// c = a b * gelu_tanh'(pre_activation); bias_gradient[j] = sum over i of c[i, j].
template <class Pre, class Gradient>
auto gelu_tanh_backward(Pre&& pre_activation, Gradient&& bias_gradient) {
  auto p = detail::epilogue_view(std::forward<Pre>(pre_activation));
  auto g = detail::epilogue_view(std::forward<Gradient>(bias_gradient));
  return fused_epilogue<op::gelu_tanh_backward, detail::absent, decltype(p), decltype(g)>{{}, p, g};
}

/// The weight-gradient product dW = dy^T x of a Linear layer, with its bias
/// gradient: matmul(dw, transpose(dy), x, epilogue::bias_gradient_a(db)).
template <class Gradient>
auto bias_gradient_a(Gradient&& bias_gradient) {
  auto g = detail::epilogue_view(std::forward<Gradient>(bias_gradient));
  return fused_epilogue<op::bias_gradient_a, detail::absent, detail::absent, decltype(g)>{{}, {}, g};
}
/// The same with dW^T = x^T dy: matmul(dwt, transpose(x), dy, epilogue::bias_gradient_b(db)).
template <class Gradient>
auto bias_gradient_b(Gradient&& bias_gradient) {
  auto g = detail::epilogue_view(std::forward<Gradient>(bias_gradient));
  return fused_epilogue<op::bias_gradient_b, detail::absent, detail::absent, decltype(g)>{{}, {}, g};
}
}  // namespace epilogue

namespace detail {
template <class E>
inline constexpr bool is_fused_epilogue_v = false;
template <epilogue_op Op, class B, class A, class G>
inline constexpr bool is_fused_epilogue_v<fused_epilogue<Op, B, A, G>> = true;
template <class E>
inline constexpr bool is_expression_epilogue_v = false;
template <class F>
inline constexpr bool is_expression_epilogue_v<epilogue::expression_t<F>> = true;

template <class E>
concept matmul_epilogue =
    std::is_same_v<E, epilogue::none> || is_fused_epilogue_v<E> || is_expression_epilogue_v<E>;

// Whether every memory operand of an epilogue is readable from the host (or the device).
template <class T>
constexpr bool operand_in_space(bool from_host) {
  if constexpr (std::is_same_v<T, absent>) return true;
  else return from_host ? T::space::host_accessible : T::space::device_accessible;
}
template <class E>
constexpr bool epilogue_in_space(bool from_host) {
  if constexpr (!is_fused_epilogue_v<E>) return true;
  else
    return operand_in_space<typename E::bias_type>(from_host) && operand_in_space<typename E::aux_type>(from_host) &&
           operand_in_space<typename E::gradient_type>(from_host);
}

// Compile-time rules of an epilogue for a matmul into c (view type C).
template <class E, class C>
constexpr bool check_epilogue_types() {
  if constexpr (is_fused_epilogue_v<E>) {
    using element = typename C::element_type;
    if constexpr (E::has_bias) {
      static_assert(std::is_same_v<typename E::bias_type::element_type, element>,
                    "fusor: a matmul bias must have c's element type (cuBLASLt's rule)");
      static_assert(E::bias_type::rank == 1, "fusor: a matmul bias is a vector, one value per column of c");
    }
    if constexpr (E::has_gradient) {
      static_assert(std::is_same_v<typename E::gradient_type::element_type, element>,
                    "fusor: a matmul bias gradient must have c's element type (cuBLASLt's rule)");
      static_assert(E::gradient_type::rank == 1, "fusor: a matmul bias gradient is a vector");
    }
    if constexpr (E::has_aux && !is_relu_mask_ref_v<typename E::aux_type>) {
      static_assert(!E::relu_like, "fusor: relu epilogues record a fusor::relu_mask");
      static_assert(std::is_same_v<typename E::aux_type::element_type, element>,
                    "fusor: a matmul's pre-activation output must have c's element type (cuBLASLt's rule)");
      static_assert(E::aux_type::rank == C::rank, "fusor: a matmul's pre-activation has c's shape");
    }
    static_assert(!E::input_gradient || C::rank == 2,
                  "fusor: bias_gradient_a/b are for 2-D products (a weight gradient sums over every row already)");
  }
  return true;
}

FUSOR_DECL void require_length(const char* what, index_t length, index_t stride, index_t expected, const std::string& c_shape);

// Run-time rules: shapes and layouts of the epilogue's operands. Returns the
// auxiliary matrix's (row stride, batch stride) for plan_gemm, or (-1, -1).
template <class E>
std::pair<index_t, index_t> check_epilogue(const E& ep, const matrix_strides& c, const matrix_strides& a, bool c_batched) {
  if constexpr (!is_fused_epilogue_v<E>) {
    return {-1, -1};
  } else {
    const std::string c_shape = matrix_shape_string(c, c_batched);
    if constexpr (!E::input_gradient) {
      if (!rows_contiguous(c))
        throw error(std::string("fusor: fused matmul epilogues (bias, relu, gelu and their backward forms) need c's rows "
                                "contiguous (unit stride along its last axis); c ") + c_shape + " has strides " +
                    matrix_strides_string(c));
    }
    if constexpr (E::has_bias) require_length("bias", ep.bias.extent(0), ep.bias.stride(0), c.cols, c_shape);
    if constexpr (E::has_gradient) {
      const index_t expected = E::op == epilogue_op::bias_gradient_a ? a.rows : c.cols;
      require_length("bias gradient", ep.gradient.extent(0), ep.gradient.stride(0), expected, c_shape);
    }
    if constexpr (E::has_aux) {
      if constexpr (is_relu_mask_ref_v<typename E::aux_type>) {
        const auto& m = ep.aux;
        if (m.batch != c.batch || m.rows != c.rows || m.cols != c.cols)
          throw shape_error(std::string("fusor: matmul's relu mask was made for shape [") + std::to_string(m.batch) + ", " +
                            std::to_string(m.rows) + ", " + std::to_string(m.cols) + "], c has shape " + c_shape);
        return {m.row_bits, m.rows * m.row_bits};
      } else {
        const matrix_strides x = strides_of(ep.aux);
        if (x.batch != c.batch || x.rows != c.rows || x.cols != c.cols)
          throw shape_error(std::string("fusor: matmul's pre-activation has shape ") + matrix_shape_string(x, c_batched) +
                            ", c has shape " + c_shape);
        // One row: its stride is never used, so any multiple of 8 covering it serves.
        const index_t row_stride = x.rows == 1 ? (x.cols + 7) / 8 * 8 : x.row_stride;
        if (!rows_contiguous(x) || row_stride % 8 != 0 || x.batch_stride % 8 != 0)
          throw error(std::string("fusor: matmul's pre-activation needs contiguous rows whose stride is a multiple "
                                  "of 8 elements (cuBLASLt's rule); it has strides ") + matrix_strides_string(x) +
                      (x.batch > 1 ? std::string(" and batch stride ") + std::to_string(x.batch_stride) : std::string()) +
                      ": give it padded rows, e.g. a slice of a tensor with a multiple of 8 columns");
        return {row_stride, x.batch_stride};
      }
    }
    return {-1, -1};
  }
}

// After planning: a bias gradient sums over every row, so the product must be one GEMM.
template <class E>
void check_epilogue_plan(const E&, const gemm_problem& p) {
  if constexpr (is_fused_epilogue_v<E>) {
    if (E::has_gradient && p.batch > 1)
      throw error("fusor: a bias gradient of a batched matmul needs the batch to flatten into one product "
                  "(a's and c's matrices one after the other in memory, b shared by the batch)");
  }
}
}  // namespace detail
}  // namespace fusor

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/kernels/impl/matmul_epilogue.ipp"
#endif
