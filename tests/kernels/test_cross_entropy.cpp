// Fused softmax cross-entropy: per-row losses and the logits' gradient against
// fp64 references at every row length in fp32, bf16 and fp16 logits; mean and
// sum reductions with an upstream gradient; central differences of the mean
// loss (fp64, tested executor); ignore_index; NaN, inf and out-of-range
// targets; in-place, strided, rank-3 and unaligned operands; the
// forward-only loss and the reduction; shape errors; launches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fusor/kernels/cross_entropy.hpp>

#include "kernels/row_kernels_emulated.hpp"
#include "kernels/rowwise_support.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_cross_entropy {

using namespace rowwise_test;

namespace {

constexpr index_t ignored = -100;

// Targets in [0, n), about one row in eight ignored (never row 0).
template <class T = int>
host_tensor<T, vector_extents> random_targets(index_t rows, index_t n, std::uint32_t seed) {
  host_tensor<T, vector_extents> t(rows);
  std::mt19937 rng(seed);
  for (index_t r = 0; r < rows; ++r) t(r) = T(r > 0 && rng() % 8 == 0 ? ignored : index_t(rng() % std::uint32_t(n)));
  return t;
}

struct loss_reference {
  std::vector<double> loss, grad;
  index_t counted = 0;
};

// Losses and gradients in double; scale = grad_scale / counted (mean) or grad_scale.
template <class T>
loss_reference cross_entropy_reference(const std::vector<double>& x, const host_tensor<T, vector_extents>& targets,
                                       index_t rows, index_t n, bool mean, double grad_scale) {
  loss_reference out{std::vector<double>(std::size_t(rows)), std::vector<double>(x.size(), 0.0), 0};
  for (index_t r = 0; r < rows; ++r) out.counted += index_t(targets(r)) != ignored;
  const double scale = mean ? grad_scale / double(out.counted) : grad_scale;
  for (index_t r = 0; r < rows; ++r) {
    const index_t t = index_t(targets(r));
    if (t == ignored) continue;
    const double* in = x.data() + r * n;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (index_t j = 0; j < n; ++j) m = std::fmax(m, in[j]);
    for (index_t j = 0; j < n; ++j) s += std::exp(in[j] - m);
    out.loss[std::size_t(r)] = m + std::log(s) - in[t];
    for (index_t j = 0; j < n; ++j)
      out.grad[std::size_t(r * n + j)] = (std::exp(in[j] - m) / s - (j == t ? 1.0 : 0.0)) * scale;
  }
  return out;
}

// dlogits are held to the tolerance of G, the gradient's precision (void:
// the logits').
template <class G = void, class P, class T>
void check_against_reference(const std::string& what, const host_tensor<P, matrix_extents>& hx,
                             const host_tensor<T, vector_extents>& targets, const std::vector<double>& losses,
                             const std::vector<double>& grad, bool mean, double grad_scale) {
  using gradient_type = std::conditional_t<std::is_void_v<G>, P, G>;
  const index_t rows = hx.extent(0), n = hx.extent(1);
  const auto xs = as_doubles(hx);
  const auto want = cross_entropy_reference(xs, targets, rows, n, mean, grad_scale);
  const double scale = mean ? grad_scale / double(want.counted) : grad_scale;
  checker check_loss(what + ", loss"), check_grad(what + ", dlogits");
  for (index_t r = 0; r < rows; ++r) {
    const index_t t = index_t(targets(r));
    double m = -1e300;
    for (index_t j = 0; j < n; ++j) m = std::fmax(m, xs[std::size_t(r * n + j)]);
    const double magnitude = t == ignored ? 1.0 : std::fabs(m) + std::fabs(xs[std::size_t(r * n + t)]) + 1.0;
    check_loss(losses[std::size_t(r)], want.loss[std::size_t(r)], magnitude, 3e-5, 0, r, 0);
    for (index_t j = 0; j < n; ++j) {
      const std::size_t i = std::size_t(r * n + j);
      const double g = want.grad[i], onehot = j == t ? 1.0 : 0.0;
      check_grad(grad[i], g, (std::fabs(g / scale) + 2 * onehot) * std::fabs(scale), row_tolerance<gradient_type>(),
                 row_floor<gradient_type>(), r, j);
    }
  }
  check_loss.finish(), check_grad.finish();
}

// How a test runs cross_entropy (mean over the rows not ignored): the
// library's call on the tested executor (two launches on the GPU: the count,
// then the rows), or in host builds the CUDA kernels' code under the SIMT
// emulator (row_kernels_emulated.hpp).
struct library_cross_entropy {
  static constexpr bool emulated = false;  // the CUDA kernels' bodies under the SIMT emulator
  template <class L, class G, class X, class T>
  static void run(const L& losses, const G& dlogits, const X& x, const T& t) {
    executor ex{};
    const auto before = launches();
    cross_entropy(losses, dlogits, x, t, {}, ex);
    finish(ex);
    if (counts_launches) CHECK(launches() - before == 2);
  }
};
#if !FUSOR_HAS_CUDA
struct emulated_cross_entropy {
  static constexpr bool emulated = true;  // the CUDA kernels' bodies under the SIMT emulator
  template <class L, class G, class X, class T>
  static void run(const L& losses, const G& dlogits, const X& x, const T& t) {
    namespace fd = fusor::detail;
    using fusor::as_view;
    const auto [g, l, logits, targets] =
        fd::cross_entropy_operands("cross_entropy", as_view(dlogits), as_view(losses), as_view(x), as_view(t));
    emulated::cross_entropy<true>(g, l, logits, targets, ignored, true, 1.0f);
  }
};
#endif

template <class P, class Run = library_cross_entropy>
void against_reference(const std::vector<row_shape>& shapes = row_shapes()) {
  for (const auto [rows, n] : shapes) {
    const auto hx = random_matrix<P>(rows, n, std::uint32_t(10 + n), -6.0, 6.0);
    const auto ht = random_targets(rows, n, std::uint32_t(20 + n));
    const auto x = to_space(hx);
    const auto t = to_space(ht);
    space_tensor<float, vector_extents> losses(rows);
    space_tensor<P, matrix_extents> dlogits(rows, n);
    poison(losses), poison(dlogits);
    Run::run(losses, dlogits, x, t);
    check_against_reference(std::string("cross_entropy ") + precision_name<P>() + " rows " + std::to_string(rows) +
                                " x " + std::to_string(n),
                            hx, ht, as_doubles(losses), as_doubles(dlogits), true, 1.0);
  }
}

// 16-bit logits in rows of whole 16-byte items at one aligned step, more of
// them than one wave of groups holds: the staged kernel, where each group
// copies its next row into shared memory while it reduces and writes this
// one (ignored rows among them). `shapes` are sized to pass a wave: the
// GPU's (H100/H200), or the emulator's two blocks or clusters.
template <class Run>
void staged_against_reference(const std::vector<row_shape>& shapes, bool counts_staged) {
  const auto before = gpu::staged_launch_counter().load();
  against_reference<bfloat16, Run>(shapes);
  against_reference<float16, Run>(shapes);
  // In place, as llm.c does: each row's gradient written over its logits.
  const auto [rows, n] = shapes.front();
  const auto hx = random_matrix<bfloat16>(rows, n, 31, -6.0, 6.0);
  const auto ht = random_targets(rows, n, 32);
  auto x = to_space(hx);
  const auto t = to_space(ht);
  space_tensor<float, vector_extents> losses(rows);
  poison(losses);
  Run::run(losses, x, x, t);
  check_against_reference("staged cross_entropy in place", hx, ht, as_doubles(losses), as_doubles(x), true, 1.0);
  if (counts_staged) CHECK(gpu::staged_launch_counter().load() - before == 2 * shapes.size() + 1);
}

}  // namespace

#if !FUSOR_HAS_CUDA
FUSOR_TEST_CASE("cross_entropy's staged kernel under the SIMT emulator: warps, blocks and clusters") {
  staged_against_reference<emulated_cross_entropy>(staged_emulated_shapes(), true);
}
#endif
#if defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("cross_entropy's staged kernel: 16-bit logits, more rows than a wave of groups") {
  staged_against_reference<library_cross_entropy>(staged_gpu_shapes(), gpu_stages_rows());
}
#endif

FUSOR_TEST_CASE("cross_entropy: losses and dlogits at every row length, fp32/bf16/fp16, against fp64") {
  for_each_precision([](auto type) { against_reference<typename decltype(type)::type>(); });
}

#if !FUSOR_HAS_CUDA
FUSOR_TEST_CASE("cross_entropy's CUDA kernels under the SIMT emulator: every row length, fp32/bf16/fp16") {
  for_each_precision([](auto type) { against_reference<typename decltype(type)::type, emulated_cross_entropy>(); });
}
#endif

FUSOR_TEST_CASE("cross_entropy: sum reduction with an upstream gradient, int64 targets, one launch") {
  const index_t rows = 9, n = 5000;
  const auto hx = random_matrix<float>(rows, n, 31, -6.0, 6.0);
  const auto ht = random_targets<std::int64_t>(rows, n, 32);
  const auto x = to_space(hx);
  const auto t = to_space(ht);
  space_tensor<float, vector_extents> losses(rows);
  space_tensor<float, matrix_extents> dlogits(rows, n);
  executor ex{};
  const auto before = launches();
  cross_entropy(losses, dlogits, x, t, {.reduction = loss_reduction::sum, .grad_scale = 2.5f}, ex);
  finish(ex);
  if (counts_launches) CHECK(launches() - before == 1);
  check_against_reference("sum, grad_scale 2.5", hx, ht, as_doubles(losses), as_doubles(dlogits), false, 2.5);
}

// The mean loss (cross_entropy_loss, then cross_entropy_reduce) in fp64 on
// the tested executor, against dlogits from cross_entropy, rows ignored
// included. Central differences, h = 1e-5, tolerance 1e-6 relative.
FUSOR_TEST_CASE("cross_entropy: dlogits match central differences of the mean loss (fp64)") {
  const index_t rows = 6;
  for (const index_t n : {index_t(1), index_t(7), index_t(33), index_t(1500)}) {
    auto hx = random_matrix<double>(rows, n, std::uint32_t(40 + n), -3.0, 3.0);
    auto ht = random_targets(rows, n, std::uint32_t(50 + n));
    ht(rows - 1) = int(ignored);
    const auto t = to_space(ht);
    executor ex{};
    auto mean_loss = [&] {
      const auto x = to_space(hx);
      space_tensor<double, vector_extents> losses(rows);
      space_tensor<double, extents<index_t>> loss;
      cross_entropy_loss(losses, x, t, {}, ex);
      cross_entropy_reduce(loss, losses, t, {}, ex);
      finish(ex);
      return as_doubles(loss)[0];
    };
    const auto x = to_space(hx);
    space_tensor<double, vector_extents> losses(rows);
    space_tensor<double, matrix_extents> dlogits(rows, n);
    cross_entropy(losses, dlogits, x, t, {}, ex);
    finish(ex);
    const auto grad = as_doubles(dlogits);
    checker check("central differences, length " + std::to_string(n));
    const double h = 1e-5;
    for (index_t sample = 0; sample < 12; ++sample) {
      const index_t row = sample % rows, column = (sample * 7919) % n;
      double& element = hx(row, column);
      const double original = element;
      element = original + h;
      const double up = mean_loss();
      element = original - h;
      const double down = mean_loss();
      element = original;
      const double numeric = (up - down) / (2 * h);
      check(grad[std::size_t(row * n + column)], numeric, std::max(1.0, std::fabs(numeric)), 1e-6, 0, row, column);
    }
    check.finish();
  }
}

// Row 0 holds a NaN, row 1 a +inf, row 2 only -inf, row 3 an out-of-range
// target: NaN loss and NaN dlogits row each. Row 4 is ignored and holds a NaN:
// it is not read, loss 0 and dlogits 0. Row 5 is ordinary. The mean is NaN.
FUSOR_TEST_CASE("cross_entropy: NaN, inf, out-of-range targets and ignored rows") {
  for (const index_t n : {index_t(33), index_t(4097), index_t(20000)}) {
    const index_t rows = 6;
    const double inf = std::numeric_limits<double>::infinity();
    auto hx = random_matrix<float>(rows, n, std::uint32_t(60 + n), -3.0, 3.0);
    hx(0, n / 2) = std::nanf("");
    hx(1, 0) = float(inf);
    for (index_t j = 0; j < n; ++j) hx(2, j) = float(-inf);
    hx(4, 1) = std::nanf("");
    host_tensor<int, vector_extents> ht(rows);
    ht(0) = 1, ht(1) = 2, ht(2) = 0, ht(3) = int(n), ht(4) = int(ignored), ht(5) = int(n - 1);
    const auto x = to_space(hx);
    const auto t = to_space(ht);
    space_tensor<float, vector_extents> losses(rows);
    space_tensor<float, matrix_extents> dlogits(rows, n);
    space_tensor<float, extents<index_t, 1>> mean;
    executor ex{};
    cross_entropy(losses, dlogits, x, t, {}, ex);
    cross_entropy_reduce(mean, losses, t, {}, ex);
    finish(ex);
    const auto hl = to_host(losses);
    const auto hg = to_host(dlogits);
    INFO("length ", n);
    for (index_t r = 0; r < 4; ++r) {
      index_t not_nan = 0;
      for (index_t j = 0; j < n; ++j) not_nan += !std::isnan(hg(r, j));
      INFO("row ", r);
      CHECK(std::isnan(hl(r)));
      CHECK(not_nan == 0);
    }
    index_t nonzero = 0, not_finite = 0;
    for (index_t j = 0; j < n; ++j) nonzero += hg(4, j) != 0.0f, not_finite += !std::isfinite(hg(5, j));
    CHECK(hl(4) == 0.0f);
    CHECK(nonzero == 0);
    CHECK(std::isfinite(hl(5)));
    CHECK(not_finite == 0);
    CHECK(std::isnan(as_doubles(mean)[0]));
  }
  // Every row ignored: the mean is 0 / 0.
  host_tensor<int, vector_extents> all_ignored(2);
  all_ignored(0) = all_ignored(1) = int(ignored);
  const auto ti = to_space(all_ignored);
  space_tensor<float, vector_extents> losses(2);
  space_tensor<float, matrix_extents> dlogits(2, 10);
  space_tensor<float, extents<index_t>> mean;
  const auto x = to_space(random_matrix<float>(2, 10, 70, -1.0, 1.0));
  executor ex{};
  cross_entropy(losses, dlogits, x, ti, {}, ex);
  cross_entropy_reduce(mean, losses, ti, {}, ex);
  finish(ex);
  CHECK(std::isnan(as_doubles(mean)[0]));
  const auto g = as_doubles(dlogits);
  CHECK(std::count(g.begin(), g.end(), 0.0) == 20);
}

// In place (dlogits = logits, as llm.c), transposed logits, rank-3 logits with
// [B, T] targets, rows one element off alignment; the forward-only loss; the
// sum reduction.
namespace {
template <class Run>
void odd_operands_against_reference() {
  for (const index_t n : {index_t(5), index_t(1000), index_t(20000), index_t(50304)}) {
    const index_t rows = 6;
    INFO("length ", n);
    const auto hx = random_matrix<float>(rows, n, std::uint32_t(80 + n), -6.0, 6.0);
    const auto ht = random_targets(rows, n, std::uint32_t(90 + n));
    const auto t = to_space(ht);
    space_tensor<float, vector_extents> losses(rows);

    auto in_place = to_space(hx);
    Run::run(losses, in_place, in_place, t);
    const auto reference_losses = as_doubles(losses);
    check_against_reference("in place", hx, ht, reference_losses, as_doubles(in_place), true, 1.0);

    host_tensor<float, matrix_extents> hxt(n, rows);
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < n; ++j) hxt(j, r) = hx(r, j);
    const auto xt = to_space(hxt);
    space_tensor<float, matrix_extents> gt(n, rows);
    Run::run(losses, transpose(gt.view()), transpose(xt.view()), t);
    const auto hg = to_host(gt);
    std::vector<double> grad(std::size_t(rows * n));
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < n; ++j) grad[std::size_t(r * n + j)] = hg(j, r);
    check_against_reference("transposed", hx, ht, as_doubles(losses), grad, true, 1.0);

    space_tensor<float, extents<index_t, 2, 3, dynamic>> x3(n), g3(n);
    space_tensor<int, extents<index_t, 2, 3>> t3;
    copy(view<float, matrix_extents, row_major, space>(x3.data(), rows, n), to_space(hx));
    copy(view<int, vector_extents, row_major, space>(t3.data(), rows), t);
    space_tensor<float, extents<index_t, 2, 3>> losses3;
    Run::run(losses3, g3, x3, t3);
    check_against_reference("rank 3", hx, ht, as_doubles(losses3), as_doubles(g3), true, 1.0);

    const auto hflat = offset_in_memory(hx, 1);
    const auto flat = to_space(hflat);
    space_tensor<float, vector_extents> gflat(rows * n + 1);
    using space_matrix = view<float, matrix_extents, row_major, space>;
    Run::run(losses, space_matrix(gflat.data() + 1, rows, n), space_matrix(flat.data() + 1, rows, n), t);
    auto got = as_doubles(gflat);
    got.erase(got.begin());
    check_against_reference("unaligned", hx, ht, as_doubles(losses), got, true, 1.0);

    // Loss only, then the reductions (the library's; their kernels' bodies are not emulated).
    if constexpr (std::is_same_v<Run, library_cross_entropy>) {
      executor ex{};
      space_tensor<float, vector_extents> only(rows);
      space_tensor<float, extents<index_t>> mean, sum;
      cross_entropy_loss(only, to_space(hx), t, {}, ex);
      cross_entropy_reduce(mean, only, t, {}, ex);
      cross_entropy_reduce(sum, only, t, {.reduction = loss_reduction::sum}, ex);
      finish(ex);
      const auto only_losses = as_doubles(only);
      double total = 0;
      index_t counted = 0;
      for (index_t r = 0; r < rows; ++r) {
        CHECK(only_losses[std::size_t(r)] == doctest::Approx(reference_losses[std::size_t(r)]).epsilon(1e-6));
        total += reference_losses[std::size_t(r)];
        counted += ht(r) != ignored;
      }
      CHECK(as_doubles(sum)[0] == doctest::Approx(total).epsilon(1e-5));
      CHECK(as_doubles(mean)[0] == doctest::Approx(total / double(counted)).epsilon(1e-5));
    }
  }
}
}  // namespace

// Contiguous rows that start between 16-byte boundaries (a vocabulary of
// 50257) are cached through the aligned window around each, where the
// gradient row starts as far past a boundary and the window fits the group's
// registers; else read twice. Logits and dlogits `x_offset` and `g_offset`
// elements into their memory (equal: cached, bar the rows whose window passes
// a warp's 1024 at n = 1021; apart: read twice), in place, and bf16 logits
// with an fp32 gradient, and the reverse.
namespace {
template <class P, class G, class Run>
void rows_between_boundaries_against_reference() {
  for (const index_t n : {index_t(1021), index_t(4093), index_t(50257)}) {
    const index_t rows = 9;  // row r starts 5r elements past a 16-byte boundary (bf16, n = 1021): every shift
    const auto hx = random_matrix<P>(rows, n, std::uint32_t(400 + n), -6.0, 6.0);
    const auto ht = random_targets(rows, n, std::uint32_t(500 + n));
    const auto t = to_space(ht);
    space_tensor<float, vector_extents> losses(rows);
    for (const auto& [x_offset, g_offset] : {std::pair{1, 1}, std::pair{6, 6}, std::pair{3, 0}, std::pair{2, 3}}) {
      const std::string what = std::string(precision_name<P>()) + " logits, " + precision_name<G>() +
                               " dlogits, rows of " + std::to_string(n) + ", x " + std::to_string(x_offset) +
                               " and dlogits " + std::to_string(g_offset) + " elements in";
      const auto hflat = offset_in_memory(hx, x_offset);
      const auto flat = to_space(hflat);
      space_tensor<G, vector_extents> gflat(rows * n + g_offset + guard_elements);
      poison(gflat), poison(losses);
      const long shifted_before = shifted_window_rows_so_far();
      Run::run(losses, view<G, matrix_extents, row_major, space>(gflat.data() + g_offset, rows, n),
               view<P, matrix_extents, row_major, space>(flat.data() + x_offset, rows, n), t);
      // Emulated: logits and dlogits at equal offsets share their windows, and rows off a boundary are cached
      // through them; apart (these pairs never line up) every row is read twice.
      if constexpr (Run::emulated) CHECK((shifted_window_rows_so_far() > shifted_before) == (x_offset == g_offset));
      const auto got = inside_guards(as_doubles(gflat), std::size_t(g_offset), guard_elements);
      check_against_reference<G>(what, hx, ht, as_doubles(losses), got, true, 1.0);
    }
    if constexpr (std::is_same_v<P, G>) {  // in place, five elements in
      const auto hflat = offset_in_memory(hx, 5);
      auto flat = to_space(hflat);
      const view<P, matrix_extents, row_major, space> xg(flat.data() + 5, rows, n);
      poison(losses);
      Run::run(losses, xg, xg, t);
      auto got = as_doubles(flat);
      got.erase(got.begin(), got.begin() + 5);
      check_against_reference(std::string(precision_name<P>()) + " in place, rows of " + std::to_string(n), hx, ht,
                              as_doubles(losses), got, true, 1.0);
    }
  }
}
}  // namespace

FUSOR_TEST_CASE("cross_entropy: rows that start between 16-byte boundaries, cached through their windows") {
  rows_between_boundaries_against_reference<bfloat16, bfloat16, library_cross_entropy>();
  rows_between_boundaries_against_reference<float, float, library_cross_entropy>();
  rows_between_boundaries_against_reference<bfloat16, float, library_cross_entropy>();
  rows_between_boundaries_against_reference<float, bfloat16, library_cross_entropy>();
#if !FUSOR_HAS_CUDA
  rows_between_boundaries_against_reference<bfloat16, bfloat16, emulated_cross_entropy>();
  rows_between_boundaries_against_reference<float, float, emulated_cross_entropy>();
  rows_between_boundaries_against_reference<bfloat16, float, emulated_cross_entropy>();
  rows_between_boundaries_against_reference<float, bfloat16, emulated_cross_entropy>();
  // The loss alone (no gradient rows): every row cached through its window.
  namespace fd = fusor::detail;
  const index_t rows = 9, n = 1021;
  const auto hx = random_matrix<bfloat16>(rows, n, 77, -6.0, 6.0);
  const auto ht = random_targets(rows, n, 78);
  const auto hflat = offset_in_memory(hx, 3);
  const view<const bfloat16, matrix_extents> logits(hflat.data() + 3, rows, n);
  host_tensor<float, vector_extents> losses(rows);
  poison(losses);
  const auto [g, l, x, targets] =
      fd::cross_entropy_operands("cross_entropy_loss", logits, fusor::as_view(losses), logits, fusor::as_view(ht));
  const long shifted_before = shifted_window_rows_so_far();
  emulated::cross_entropy<false>(g, l, x, targets, ignored, true, 1.0f);
  CHECK(shifted_window_rows_so_far() > shifted_before);
  const auto want = cross_entropy_reference(as_doubles(hx), ht, rows, n, true, 1.0);
  for (index_t r = 0; r < rows; ++r) CHECK(losses(r) == doctest::Approx(want.loss[std::size_t(r)]).epsilon(1e-5));
#endif
}

FUSOR_TEST_CASE("cross_entropy: in-place, strided, rank-3 and unaligned operands; loss only; reduce") {
  odd_operands_against_reference<library_cross_entropy>();
#if !FUSOR_HAS_CUDA
  odd_operands_against_reference<emulated_cross_entropy>();  // the CUDA kernels' strided and unaligned paths
#endif
}

FUSOR_TEST_CASE("cross_entropy: shape errors name both shapes") {
  space_tensor<float, matrix_extents> x(3, 4), g(3, 5);
  space_tensor<float, vector_extents> losses(3), losses2(2);
  space_tensor<int, vector_extents> t(3), t4(4);
  space_tensor<float, vector_extents> two(2);
  executor ex{};
  expect_error<shape_error>([&] { cross_entropy(losses, g, x, t, {}, ex); }, {"cross_entropy", "[3, 5]", "[3, 4]"});
  expect_error<shape_error>([&] { cross_entropy(losses2, x, x, t, {}, ex); }, {"cross_entropy", "losses", "[2]", "[3, 4]"});
  expect_error<shape_error>([&] { cross_entropy(losses, x, x, t4, {}, ex); }, {"cross_entropy", "targets", "[4]", "[3, 4]"});
  expect_error<shape_error>([&] { cross_entropy_loss(losses, x, t4, {}, ex); }, {"cross_entropy_loss", "[4]", "[3, 4]"});
  expect_error<shape_error>([&] { cross_entropy_reduce(two, losses, t, {}, ex); }, {"cross_entropy_reduce", "[2]"});
  space_tensor<float, extents<index_t, 1>> one;
  expect_error<shape_error>([&] { cross_entropy_reduce(one, losses2, t, {}, ex); },
                            {"cross_entropy_reduce", "[2]", "[3]"});
}

}  // namespace test_cross_entropy
