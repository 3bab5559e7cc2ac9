// Matmul epilogues against their reference formulas, in fp32 and bf16: bias,
// relu and gelu_tanh with and without bias and with their auxiliary outputs
// (relu mask, pre-activation); the backward forms (activation gradient times
// the product, with the bias gradient summed down the columns); the bias
// gradient of a weight-gradient product; batched epilogues; and an arbitrary
// fusor expression applied to the product in one more pass. Every bias
// gradient runs both ways on the GPU: fused by cuBLASLt, and summed apart by
// fusor (the fallback where cuBLASLt has no algorithm with the epilogue, forced
// by scoped_separate_bias_gradient); the host executor ignores the switch.
#include "kernels/test_matmul_support.hpp"

#include <cmath>
#include <random>
#include <vector>

#include <fusor/kernels/matmul_bias_gradient.hpp>
#if !defined(FUSOR_TEST_CUDA)
#include <fusor/kernels/simt_emulator.hpp>
#endif

using namespace matmul_test;

namespace {
// A Linear layer's shapes: x [m, k], w [n, k] (read as w^T), c [m, n]. The
// pre-activation is stored with padded rows (stride a multiple of 8).
constexpr index_t m = 37, n = 20, k = 29, padded_n = 24;
#if defined(FUSOR_TEST_CUDA)
constexpr bool is_cuda = true;
#else
constexpr bool is_cuda = false;
#endif

// Launches since `before`, less those of a bias gradient summed apart (one or
// two kernels after the GEMM where cuBLASLt has no algorithm with the epilogue).
struct launch_count {
  std::uint64_t all = launches(), separate = detail::separate_bias_gradient_launches().load();
  std::uint64_t fused_since() const {
    return launches() - all - (detail::separate_bias_gradient_launches().load() - separate);
  }
  std::uint64_t separate_since() const { return detail::separate_bias_gradient_launches().load() - separate; }
};

// Tolerance of an activation epilogue: cuBLASLt may evaluate tanh with the
// GPU's approximation (relative error about 2^-11), the host evaluates it exactly.
template <class P>
constexpr double activation_tolerance() {
  return is_cuda ? std::max(matmul_tolerance<P, P>(), 2e-3) : matmul_tolerance<P, P>();
}

// Through s = (1 + tanh u) / 2 = sigmoid(2u), which keeps its digits where x is very negative.
double gelu_tanh_sigmoid_ref(double x) { return 1 / (1 + std::exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double gelu_tanh_ref(double x) { return x * gelu_tanh_sigmoid_ref(x); }
double gelu_tanh_derivative_ref(double x) {
  const double s = gelu_tanh_sigmoid_ref(x);
  return s + x * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x) * 2 * s * (1 - s);
}
// How much a product's rounding counts in c = product * gelu'(pre): |gelu'|,
// plus a floor, because the GPU's gelu' is only right to about 2^-12 in
// absolute terms (cuBLASLt's DGELU gives exactly 0 where pre < -10, where the
// exact derivative is 1e-28 and a purely relative check would ask for zero error).
double gelu_derivative_weight(double derivative) { return std::fabs(derivative) + 0.25; }

template <class P>
struct linear_case {
  host_tensor<P, matrix> x_host = random_host<P>(matrix(m, k), 61);
  host_tensor<P, matrix> w_host = random_host<P>(matrix(n, k), 62);
  host_tensor<P, vector> bias_host = random_host<P>(vector(n), 63);
  space_tensor<P, matrix> x = to_space(x_host), w = to_space(w_host);
  space_tensor<P, vector> bias = to_space(bias_host);
  product z = reference_product(x_host, transpose(w_host.view()), 1, m, n, k);  // x w^T
};

enum class activation { none, relu, gelu };

// Forward: c = act(x w^T [+ bias]), pre = x w^T [+ bias], in every combination.
template <class P>
void check_forward(activation act, bool with_bias, bool with_aux) {
  INFO("activation ", int(act), ", bias ", with_bias, ", auxiliary output ", with_aux);
  linear_case<P> lc;
  space_tensor<P, matrix> c(m, n), pre_storage(m, padded_n);
  poison(c);
  poison(pre_storage);
  const auto pre = slice<1>(pre_storage.view(), 0, n);
  relu_mask<space> mask(c.extents());
  executor ex{};
  const auto wt = transpose(lc.w.view());
  const auto before = launches();
  if (act == activation::none) {
    if (with_bias) matmul(c, lc.x, wt, epilogue::bias(lc.bias), ex);
    else matmul(c, lc.x, wt, ex);
  } else if (act == activation::relu) {
    if (with_bias && with_aux) matmul(c, lc.x, wt, epilogue::relu(lc.bias, mask), ex);
    else if (with_bias) matmul(c, lc.x, wt, epilogue::relu(lc.bias), ex);
    else if (with_aux) matmul(c, lc.x, wt, epilogue::relu(epilogue::no_bias, mask), ex);
    else matmul(c, lc.x, wt, epilogue::relu(), ex);
  } else {
    if (with_bias && with_aux) matmul(c, lc.x, wt, epilogue::gelu_tanh(lc.bias, pre), ex);
    else if (with_bias) matmul(c, lc.x, wt, epilogue::gelu_tanh(lc.bias), ex);
    else if (with_aux) matmul(c, lc.x, wt, epilogue::gelu_tanh(epilogue::no_bias, pre), ex);
    else matmul(c, lc.x, wt, epilogue::gelu_tanh(), ex);
  }
  finish(ex);
  CHECK(launches() - before == launches_per_matmul);

  const double tol = matmul_tolerance<P, P>();
  const double act_tol = act == activation::none ? tol : activation_tolerance<P>();
  const auto got = to_host(c);
  const auto got_pre = to_host(pre_storage);
  const auto mask_bytes = [&] {
    host_tensor<std::uint8_t, vector> h(index_t(mask.size_bytes()));
    copy(h, mask.bytes());
    return h;
  }();
  checker check_c, check_pre;
  index_t mask_wrong = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double bias = with_bias ? to_double(lc.bias_host(j)) : 0.0;
      const double z = lc.z.value(0, i, j) + bias, scale = lc.z.scale(0, i, j) + std::fabs(bias);
      const double want = act == activation::relu ? std::max(z, 0.0) : act == activation::gelu ? gelu_tanh_ref(z) : z;
      check_c(to_double(got(i, j)), want, 1.2 * scale, act_tol, "c", 0, i, j);  // |act'| <= 1.13
      if (with_aux && act == activation::gelu) check_pre(to_double(got_pre(i, j)), z, scale, tol, "pre", 0, i, j);
      // The mask's bits are checked where fusor writes them; on the GPU they are
      // cuBLASLt's (the backward test reads them back through the epilogue).
      if (with_aux && act == activation::relu && !is_cuda && std::fabs(z) > tol * scale) {
        const index_t bit = i * mask.row_bits() + j;
        mask_wrong += bool((mask_bytes(bit / 8) >> (bit % 8)) & 1) != (z > 0);
      }
    }
  MATMUL_CHECK_ALL(check_c);
  MATMUL_CHECK_ALL(check_pre);
  CHECK(mask_wrong == 0);
}

// Backward: c = dy w2 times act'(pre) with the bias gradient db[j] = sum_i c[i, j].
// For relu the mask comes from a forward matmul (cuBLASLt's bit layout is its own).
template <class P>
void check_backward(activation act, bool with_gradient, bool separate) {
  INFO("activation ", int(act), ", bias gradient ", with_gradient, ", summed apart ", separate);
  const detail::scoped_separate_bias_gradient hook(separate);
  // Forward x [m, k] w1^T -> h [m, n]; backward dy [m, k2] times w2 [k2, n] -> dpre [m, n].
  constexpr index_t k2 = 23;
  linear_case<P> lc;
  const auto dy_host = random_host<P>(matrix(m, k2), 71);
  const auto w2_host = random_host<P>(matrix(k2, n), 72);
  const auto dy = to_space(dy_host), w2 = to_space(w2_host);
  const product g = reference_product(dy_host, w2_host, 1, m, n, k2);
  host_tensor<P, matrix> pre_host(m, padded_n);
  fill_random(pre_host, 73);
  const auto pre_storage = to_space(pre_host);
  const auto pre = slice<1>(pre_storage.view(), 0, n);
  relu_mask<space> mask(matrix(m, n));
  space_tensor<P, matrix> h(m, n), dpre(m, n);
  space_tensor<P, vector> db(n);
  poison(dpre);
  poison(db);
  executor ex{};
  if (act == activation::relu) matmul(h, lc.x, transpose(lc.w.view()), epilogue::relu(lc.bias, mask), ex);
  const launch_count before;
  if (act == activation::relu) {
    if (with_gradient) matmul(dpre, dy, w2, epilogue::relu_backward(mask, db), ex);
    else matmul(dpre, dy, w2, epilogue::relu_backward(mask), ex);
  } else {
    if (with_gradient) matmul(dpre, dy, w2, epilogue::gelu_tanh_backward(pre, db), ex);
    else matmul(dpre, dy, w2, epilogue::gelu_tanh_backward(pre), ex);
  }
  finish(ex);
  CHECK(before.fused_since() == launches_per_matmul);
  if (is_cuda && separate && with_gradient) CHECK(before.separate_since() >= 1);
  if (!with_gradient) CHECK(before.separate_since() == 0);

  const double tol = act == activation::relu ? matmul_tolerance<P, P>() : activation_tolerance<P>();
  const auto got = to_host(dpre);
  checker check_c, check_db;
  index_t ambiguous = 0;
  std::vector<double> column_sum(n, 0.0), column_scale(n, 0.0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      double want, factor;
      if (act == activation::relu) {
        const double z = lc.z.value(0, i, j) + to_double(lc.bias_host(j));
        factor = z > 0 ? 1 : 0;
        if (std::fabs(z) <= tol * (lc.z.scale(0, i, j) + 2)) {  // the forward's rounding may decide either way
          ++ambiguous;
          factor = to_double(got(i, j)) == 0 ? 0 : 1;
        }
      } else {
        factor = gelu_tanh_derivative_ref(to_double(pre_host(i, j)));
      }
      want = g.value(0, i, j) * factor;
      const double weight = act == activation::gelu ? gelu_derivative_weight(factor) : std::fabs(factor);
      check_c(to_double(got(i, j)), want, g.scale(0, i, j) * weight, tol, "c", 0, i, j);
      column_sum[j] += want;
      column_scale[j] += g.scale(0, i, j) * weight;
    }
  MATMUL_CHECK_ALL(check_c);
  CHECK(ambiguous < m * n / 10);
  if (with_gradient) {
    const auto got_db = to_host(db);
    for (index_t j = 0; j < n; ++j)
      check_db(to_double(got_db(j)), column_sum[j], column_scale[j] + std::fabs(column_sum[j]), tol, "db", 0, 0, j);
    MATMUL_CHECK_ALL(check_db);
  }
}
}  // namespace

FUSOR_TEST_CASE("matmul epilogues, forward: bias, relu, gelu_tanh, with and without bias and auxiliary output") {
  for (activation act : {activation::none, activation::relu, activation::gelu})
    for (bool with_bias : {false, true})
      for (bool with_aux : {false, true}) {
        if (act == activation::none && with_aux) continue;
        check_forward<float>(act, with_bias, with_aux);
        check_forward<bf16>(act, with_bias, with_aux);
      }
}

FUSOR_TEST_CASE("matmul epilogues, backward: relu and gelu_tanh gradients, with the bias gradient") {
  for (activation act : {activation::relu, activation::gelu})
    for (bool with_gradient : {false, true})
      for (bool separate : {false, true}) {
        check_backward<float>(act, with_gradient, separate);
        check_backward<bf16>(act, with_gradient, separate);
      }
}

namespace {
// A weight-gradient product with its bias gradient, from dy [rows, n] and
// x [rows, k]: dw = dy^T x with db = row sums of a = dy^T (bias_gradient_a),
// and dw^T = x^T dy with db = column sums of b = dy (bias_gradient_b); a and b
// in form f, c of layout L (row-major: cuBLASLt's BGRADB and BGRADA; column-major:
// BGRADA and BGRADB), fused or summed apart.
template <class P, class L>
void check_weight_gradient(index_t rows, form f, bool separate) {
  INFO(name(f), ", ", rows, " rows, c ", std::is_same_v<L, row_major> ? "row-major" : "column-major",
       ", summed apart ", separate);
  const detail::scoped_separate_bias_gradient hook(separate);
  const auto dy_host = random_host<P>(matrix(rows, n), 81);
  const auto x_host = random_host<P>(matrix(rows, k), 82);
  host_tensor<P, matrix> dyt_host(n, rows);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < n; ++j) dyt_host(j, i) = dy_host(i, j);
  const auto x = to_space(x_host);
  std::vector<double> sum(std::size_t(n), 0.0), scale(std::size_t(n), 0.0);
  for (index_t i = 0; i < rows; ++i)
    for (index_t j = 0; j < n; ++j) {
      sum[std::size_t(j)] += to_double(dy_host(i, j));
      scale[std::size_t(j)] += std::fabs(to_double(dy_host(i, j)));
    }
  // Sums of thousands of terms: a few times the rounding of short ones.
  const double tol = matmul_tolerance<P, P>() * (rows > 1000 ? 4 : 1);
  executor ex{};
  const auto check_db = [&](const auto& db, const char* what) {
    const auto got = to_host(db);
    checker check;
    for (index_t j = 0; j < n; ++j) check(to_double(got(j)), sum[std::size_t(j)], scale[std::size_t(j)], tol, what, 0, 0, j);
    MATMUL_CHECK_ALL(check);
  };
  const auto check_launches = [&](const launch_count& before) {
    CHECK(before.fused_since() == launches_per_matmul);
    if (is_cuda && separate) CHECK(before.separate_since() >= 1);
  };
  space_tensor<P, matrix, L> dw(n, k), dwt(k, n);
  space_tensor<P, vector> db_a(n), db_b(n);
  with_operand(f, dyt_host, [&](const auto& a) {
    poison(dw), poison(db_a);
    const launch_count before;
    matmul(dw, a, x, epilogue::bias_gradient_a(db_a), ex);
    finish(ex);
    check_launches(before);
    expect_product(to_host(dw), reference_product(dyt_host, x_host, 1, n, k, rows), tol);
    check_db(db_a, "bias_gradient_a");
  });
  with_operand(f, dy_host, [&](const auto& b) {
    poison(dwt), poison(db_b);
    const launch_count before;
    matmul(dwt, transpose(x.view()), b, epilogue::bias_gradient_b(db_b), ex);
    finish(ex);
    check_launches(before);
    expect_product(to_host(dwt), reference_product(transpose(x_host.view()), dy_host, 1, k, n, rows), tol);
    check_db(db_b, "bias_gradient_b");
  });
}
}  // namespace

FUSOR_TEST_CASE("matmul epilogues: the bias gradient of a weight-gradient product (of a or of b), fused and summed apart") {
  for (index_t rows : {m, index_t(2500)})
    for (form f : {form::transposed_row_major, form::row_major, form::col_major, form::transposed_col_major})
      for (bool separate : {false, true}) {
        check_weight_gradient<float, row_major>(rows, f, separate);
        check_weight_gradient<bf16, row_major>(rows, f, separate);
        check_weight_gradient<float, col_major>(rows, f, separate);
      }
}

#if !defined(FUSOR_TEST_CUDA)
// The sums by the kernels themselves, run under the SIMT emulator as
// launch_strided_sum launches them; outputs and partial sums start as NaN, so
// one not written shows.
std::vector<double> emulated_strided_sums(const std::vector<double>& x, const detail::strided_sum_shape& s,
                                          const detail::strided_sum_plan& plan) {
  std::vector<double> out(std::size_t(s.outputs), std::nan(""));
  std::vector<double> partials(std::size_t(plan.splits * s.outputs), std::nan(""));
  const detail::strided_sum_job<double, double, double> job{x.data(), out.data(),
                                                            plan.splits > 1 ? partials.data() : nullptr, s, plan};
  detail::emulate_kernel(detail::simt_grid{plan.blocks, plan.splits}, detail::strided_sum_threads, 0,
                         [&](unsigned char*) { detail::strided_sum_block<detail::emulated_simt>(job); });
  if (plan.splits > 1)
    detail::emulate_kernel(detail::simt_grid{detail::strided_sum_finish_blocks(s), 1},
                           detail::strided_sum_finish_threads, 0,
                           [&](unsigned char*) { detail::strided_sum_finish_block<detail::emulated_simt>(job); });
  return out;
}
#endif

FUSOR_TEST_CASE("the bias gradient summed apart: its chunks and lanes add every element once (the kernel's plan, on "
                "the host; its kernels under the SIMT emulator; the host executor's sums)") {
  struct sums_case {
    detail::strided_sum_shape shape;
    int multiprocessors;
    std::size_t scratch;
  };
  const sums_case cases[] = {
      {{20, 2500, 2500, 1}, 132, 1 << 20},  // summed axis contiguous: a warp per sum, split
      {{3, 37, 37, 1}, 132, 1 << 20},       // short: one chunk
      {{20, 2500, 1, 20}, 132, 1 << 20},    // outputs contiguous (a Linear's dy^T): a block column per sum
      {{8, 2352, 1, 8}, 132, 1 << 20},      // a convolution's dz^T
      {{20, 2500, 1, 20}, 132, 3 * 20 * 8}, // partial sums limited by the workspace: at most 3 chunks
      {{20, 2500, 1, 20}, 0, 0},            // no workspace for partial sums: one chunk
      {{5, 1, 1, 5}, 8, 1 << 20},           // one term each
      {{1, 100000, 100000, 1}, 16, 1 << 20},
      {{300, 4099, 4099, 1}, 16, 1 << 20},
      {{300, 77, 1, 300}, 132, 1 << 20},    // outputs contiguous, more than the host's block of 128
      {{129, 5, 2, 300}, 132, 1 << 20},     // outputs strided, summed axis more so
  };
  for (const sums_case& t : cases) {
    const auto& s = t.shape;
    INFO("outputs ", s.outputs, ", length ", s.length, ", strides ", s.output_stride, " ", s.summed_stride);
    const auto plan = detail::plan_strided_sum(s, sizeof(double), t.multiprocessors, t.scratch);
    CHECK(plan.splits >= 1);
    CHECK(plan.chunk * plan.splits >= s.length);
    CHECK(plan.chunk * (plan.splits - 1) < s.length);  // no empty chunk
    CHECK(plan.blocks * plan.outputs_per_block >= s.outputs);
    CHECK(plan.scratch_bytes <= t.scratch);
    CHECK(plan.scratch_bytes == (plan.splits > 1 ? std::size_t(plan.splits * s.outputs) * sizeof(double) : 0));
    CHECK(plan.warp_per_output == (s.summed_stride == 1 && s.length > 1));
    // Integers: every sum exact, so a missed or repeated element shows.
    const index_t span = (s.outputs - 1) * s.output_stride + (s.length - 1) * s.summed_stride + 1;
    std::vector<double> x(std::size_t(span), 0.0);
    std::mt19937 rng(7);
    for (auto& v : x) v = double(std::int64_t(rng() % 2001) - 1000);
    std::vector<double> want(std::size_t(s.outputs), 0.0);
    for (index_t o = 0; o < s.outputs; ++o)
      for (index_t q = 0; q < s.length; ++q)
        want[std::size_t(o)] += x[std::size_t(o * s.output_stride + q * s.summed_stride)];
    const auto wrong_sums = [&](const std::vector<double>& got) {
      index_t wrong = 0;
      for (std::size_t o = 0; o < want.size(); ++o) wrong += got[o] != want[o];
      return wrong;
    };
    std::vector<double> planned(std::size_t(s.outputs), 0.0);
    for (index_t o = 0; o < s.outputs; ++o)
      for (index_t split = 0; split < plan.splits; ++split)
        for (int lane = 0; lane < plan.lanes; ++lane)
          planned[std::size_t(o)] += detail::strided_partial_sum<double>(x.data(), s, plan, o, split, lane);
    CHECK(wrong_sums(planned) == 0);
#if !defined(FUSOR_TEST_CUDA)
    CHECK(wrong_sums(emulated_strided_sums(x, s, plan)) == 0);
    // The host executor's sums (matmul_host.hpp) of x as a [outputs, length]
    // and as b [length, outputs], into outputs poisoned with NaN.
    using mapping = typename strided::template mapping<matrix>;
    const ::cuda::std::array<index_t, 2> strides{s.output_stride, s.summed_stride};
    const view<double, matrix, strided> as_a(x.data(), mapping(matrix(s.outputs, s.length), strides));
    for (const bool summing_b : {false, true}) {
      INFO("summing b ", summing_b);
      std::vector<double> host_sums(std::size_t(s.outputs), std::nan(""));
      const view<double, vector> db(host_sums.data(), vector(s.outputs));
      if (summing_b)
        detail::host_input_bias_gradient<double>(epilogue::bias_gradient_b(db), as_a, transpose(as_a), host_executor{});
      else
        detail::host_input_bias_gradient<double>(epilogue::bias_gradient_a(db), as_a, transpose(as_a), host_executor{});
      CHECK(wrong_sums(host_sums) == 0);
    }
#endif
  }
}

FUSOR_TEST_CASE("matmul epilogues on a batch: a shared weight (one GEMM) and batched weights") {
  constexpr index_t batch = 3, t = 5;
  const auto x_host = random_host<float>(batch_of_matrices(batch, t, k), 91);
  const auto w_host = random_host<float>(matrix(n, k), 92);
  const auto ws_host = random_host<float>(batch_of_matrices(batch, n, k), 93);
  const auto bias_host = random_host<float>(vector(n), 94);
  const auto x = to_space(x_host), ws = to_space(ws_host);
  const auto w = to_space(w_host);
  const auto bias = to_space(bias_host);
  space_tensor<float, batch_of_matrices> c(batch, t, n), pre_storage(batch, t, padded_n);
  space_tensor<float, vector> db(n);
  const auto pre = slice<2>(pre_storage.view(), 0, n);
  executor ex{};
  const double tol = activation_tolerance<float>();
  const auto check_forward_batch = [&](const product& z) {
    const auto got = to_host(c);
    const auto got_pre = to_host(pre_storage);
    checker check;
    for (index_t b = 0; b < batch; ++b)
      for (index_t i = 0; i < t; ++i)
        for (index_t j = 0; j < n; ++j) {
          const double v = z.value(b, i, j) + to_double(bias_host(j)), scale = z.scale(b, i, j) + 2;
          check(to_double(got(b, i, j)), gelu_tanh_ref(v), 1.2 * scale, tol, "c", b, i, j);
          check(to_double(got_pre(b, i, j)), v, scale, tol, "pre", b, i, j);
        }
    MATMUL_CHECK_ALL(check);
  };
  poison(c), poison(pre_storage);
  matmul(c, x, transpose(w.view()), epilogue::gelu_tanh(bias, pre), ex);
  finish(ex);
  check_forward_batch(reference_product(x_host, transpose(w_host.view()), batch, t, n, k));
  poison(c), poison(pre_storage);
  matmul(c, x, permute<0, 2, 1>(ws.view()), epilogue::gelu_tanh(bias, pre), ex);
  finish(ex);
  check_forward_batch(reference_product(x_host, permute<0, 2, 1>(ws_host.view()), batch, t, n, k));

  // Backward over the flattened batch: db sums over every row of every matrix,
  // fused and summed apart.
  for (bool separate : {false, true}) {
    INFO("summed apart ", separate);
    const detail::scoped_separate_bias_gradient hook(separate);
    poison(c), poison(db);
    matmul(c, x, transpose(w.view()), epilogue::gelu_tanh_backward(pre, db), ex);
    finish(ex);
    const auto z = reference_product(x_host, transpose(w_host.view()), batch, t, n, k);
    const auto got = to_host(c), pre_values = to_host(pre_storage);
    const auto got_db = to_host(db);
    checker check;
    for (index_t j = 0; j < n; ++j) {
      double sum = 0, scale = 0;
      for (index_t b = 0; b < batch; ++b)
        for (index_t i = 0; i < t; ++i) {
          const double d = gelu_tanh_derivative_ref(to_double(pre_values(b, i, j)));
          const double weight = gelu_derivative_weight(d);
          check(to_double(got(b, i, j)), z.value(b, i, j) * d, z.scale(b, i, j) * weight, tol, "c", b, i, j);
          sum += z.value(b, i, j) * d, scale += z.scale(b, i, j) * weight;
        }
      check(to_double(got_db(j)), sum, scale, tol, "db", 0, 0, j);
    }
    MATMUL_CHECK_ALL(check);
  }
}

FUSOR_TEST_CASE("matmul epilogues: any fusor expression of the product, one more pass") {
  linear_case<float> lc;
  const auto residual_host = random_host<float>(matrix(m, n), 101);
  const auto residual = to_space(residual_host);
  space_tensor<float, matrix> c(m, n);
  space_tensor<bfloat16, matrix> c16(m, n);
  poison(c), poison(c16);
  executor ex{};
  const auto before = launches();
  matmul(c, lc.x, transpose(lc.w.view()),
         epilogue::expression([&](auto y) { return silu(y + lc.bias) + residual * 0.5f; }), ex);
  finish(ex);
  CHECK(launches() - before == launches_per_matmul + (launches_per_matmul ? 1 : 0));  // GEMM, then one pass
  // bf16 c: on the host the expression reads the fp32 product and converts once.
  const auto x16_host = cast_host<bfloat16>(lc.x_host), w16_host = cast_host<bfloat16>(lc.w_host);
  const auto x16 = to_space(x16_host), w16 = to_space(w16_host);
  matmul(c16, x16, transpose(w16.view()), epilogue::expression([](auto y) { return y * 2 - 1; }), ex);
  finish(ex);
  const auto got = to_host(c);
  const auto got16 = to_host(c16);
  const product z16 = reference_product(x16_host, transpose(w16_host.view()), 1, m, n, k);
  checker check;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j) {
      const double v = lc.z.value(0, i, j) + to_double(lc.bias_host(j));
      const double want = v / (1 + std::exp(-v)) + 0.5 * to_double(residual_host(i, j));
      check(to_double(got(i, j)), want, 1.2 * (lc.z.scale(0, i, j) + 2) + 2, 1e-5, "c", 0, i, j);
      check(to_double(got16(i, j)), 2 * z16.value(0, i, j) - 1, 2 * z16.scale(0, i, j) + 1, 1e-2, "bf16", 0, i, j);
    }
  MATMUL_CHECK_ALL(check);
}
