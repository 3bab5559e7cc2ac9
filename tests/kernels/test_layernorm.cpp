// layernorm / rmsnorm and their backward passes: every row length against fp64
// references in fp32, bf16 and fp16 (statistics saved in fp32); backward
// (dx, dweight, dbias) against central differences of the forward (fp64
// storage, tested executor); NaN rows; strided, unaligned, rank-3, in-place
// operands; bitwise-repeatable parameter gradients; shape errors; launches.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fusor/kernels/layernorm.hpp>

#include "kernels/row_kernels_emulated.hpp"
#include "kernels/rowwise_support.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_layernorm {

using namespace rowwise_test;

namespace {

constexpr float epsilon = 1e-5f;

struct norm_reference {
  std::vector<double> y, mean, rstd;
};

// Layernorm (centered) or rmsnorm of each row, in double.
norm_reference norm_forward_reference(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& b, index_t rows, index_t n, bool centered) {
  norm_reference out{std::vector<double>(x.size()), std::vector<double>(std::size_t(rows)),
                     std::vector<double>(std::size_t(rows))};
  for (index_t r = 0; r < rows; ++r) {
    const double* in = x.data() + r * n;
    double mean = 0, squares = 0;
    if (centered) {
      for (index_t j = 0; j < n; ++j) mean += in[j];
      mean /= double(n);
    }
    for (index_t j = 0; j < n; ++j) squares += (in[j] - mean) * (in[j] - mean);
    const double rstd = 1 / std::sqrt(squares / double(n) + double(epsilon));
    for (index_t j = 0; j < n; ++j)
      out.y[std::size_t(r * n + j)] = (in[j] - mean) * rstd * w[std::size_t(j)] + (centered ? b[std::size_t(j)] : 0.0);
    out.mean[std::size_t(r)] = mean;
    out.rstd[std::size_t(r)] = rstd;
  }
  return out;
}

// How a test runs the norms: the library's calls on the tested executor, or
// in host builds the CUDA kernels' code under the SIMT emulator
// (row_kernels_emulated.hpp).
struct library_norms {
  template <class Y, class M, class R, class X, class W, class B>
  static void forward(bool centered, const Y& y, const M& mean, const R& rstd, const X& x, const W& w, const B& b) {
    executor ex{};
    const auto before = launches();
    if (centered) layernorm(y, mean, rstd, x, w, b, {epsilon}, ex);
    else rmsnorm(y, rstd, x, w, {epsilon}, ex);
    finish(ex);
    if (counts_launches) CHECK(launches() - before == 1);
  }
  template <class DX, class DW, class DY, class X, class W, class M, class R>
  static void backward(bool centered, const DX& dx, const DW& dw, const DW& db, const DY& dy, const X& x, const W& w,
                       const M& mean, const R& rstd) {
    executor ex{};
    const auto before = launches();
#if defined(FUSOR_TEST_CUDA)
    const auto clusters_before = gpu::cluster_launch_counter().load();
#endif
    if (centered) layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex);
    else rmsnorm_backward(dx, dw, dy, x, w, rstd, ex);
    finish(ex);
    // Two launches where the accumulator rows fit shared memory, three for long rows on a GPU.
    const auto launched = launches() - before;
    if (counts_launches) CHECK((launched == 2 || launched == 3));
#if defined(FUSOR_TEST_CUDA)
    // Rows a portable cluster holds: on sm_90 its blocks accumulate their parts (one cluster launch, then the sums).
    namespace fd = fusor::detail;
    using XE = typename X::element_type;
    using DYE = typename DY::element_type;
    constexpr int V = fd::vector_lanes<typename DX::element_type, DYE, XE, typename W::element_type>;
    const fd::row_launch shape = fd::row_launch_for<V, fd::cached_bytes<XE, DYE>>(x.extent(1));
    if (shape.cluster_blocks > 1 && shape.cluster_blocks <= fd::portable_cluster_blocks && gpu_compute_major() >= 9) {
      INFO("rows of ", x.extent(1), " in clusters of ", shape.cluster_blocks);
      CHECK(launched == 2);
      CHECK(gpu::cluster_launch_counter().load() - clusters_before == 1);
    }
#endif
  }
};
#if !FUSOR_HAS_CUDA
struct emulated_norms {
  template <class Y, class M, class R, class X, class W, class B>
  static void forward(bool centered, const Y& y, const M& mean, const R& rstd, const X& x, const W& w, const B& b) {
    namespace fd = fusor::detail;
    using fusor::as_view;
    if (centered)
      emulated::norm_forward<true>(fd::norm_forward_operands<true>("layernorm", as_view(y), as_view(mean),
                                                                   as_view(rstd), as_view(x), as_view(w), as_view(b)),
                                   epsilon);
    else
      emulated::norm_forward<false>(fd::norm_forward_operands<false>("rmsnorm", as_view(y), as_view(rstd),
                                                                     as_view(rstd), as_view(x), as_view(w), as_view(w)),
                                    epsilon);
  }
  template <class DX, class DW, class DY, class X, class W, class M, class R>
  static void backward(bool centered, const DX& dx, const DW& dw, const DW& db, const DY& dy, const X& x, const W& w,
                       const M& mean, const R& rstd) {
    namespace fd = fusor::detail;
    using fusor::as_view;
    if (centered)
      emulated::norm_backward<true>(fd::norm_backward_operands<true>("layernorm_backward", as_view(dx), as_view(dw),
                                                                     as_view(db), as_view(dy), as_view(x), as_view(w),
                                                                     as_view(mean), as_view(rstd)));
    else
      emulated::norm_backward<false>(fd::norm_backward_operands<false>("rmsnorm_backward", as_view(dx), as_view(dw),
                                                                       as_view(dw), as_view(dy), as_view(x),
                                                                       as_view(w), as_view(rstd), as_view(rstd)));
  }
};
#endif

// Rows stored in P, weight and bias (and their gradients) in W.
template <class P, class Run = library_norms, class W = P>
void forward_against_reference(bool centered, const std::vector<row_shape>& shapes = row_shapes()) {
  for (const auto [rows, n] : shapes) {
    // Rows centred near 3, so a one-pass variance would lose digits.
    const auto hx = random_matrix<P>(rows, n, std::uint32_t(100 + n), 1.0, 5.0);
    const auto hw = random_vector<W>(n, std::uint32_t(200 + n), 0.5, 1.5);
    const auto hb = random_vector<W>(n, std::uint32_t(300 + n), -1.0, 1.0);
    const auto x = to_space(hx);
    const auto w = to_space(hw);
    const auto b = to_space(hb);
    space_tensor<P, matrix_extents> y(rows, n);
    space_tensor<float, vector_extents> mean(rows), rstd(rows);
    poison(y), poison(mean), poison(rstd);
    Run::forward(centered, y, mean, rstd, x, w, b);

    const auto xs = as_doubles(hx), ws = as_doubles(hw), bs = as_doubles(hb);
    const auto want = norm_forward_reference(xs, ws, bs, rows, n, centered);
    const auto ys = as_doubles(y), means = as_doubles(mean), rstds = as_doubles(rstd);
    const std::string what = std::string(centered ? "layernorm " : "rmsnorm ") + precision_name<P>() + " rows " +
                             std::to_string(rows) + " x " + std::to_string(n) + ", " + precision_name<W>() +
                             " weight";
    checker check_y(what + ", y"), check_mean(what + ", mean"), check_rstd(what + ", rstd");
    for (index_t r = 0; r < rows; ++r) {
      for (index_t j = 0; j < n; ++j) {
        const std::size_t i = std::size_t(r * n + j);
        // y = x * rstd * w - mean * rstd * w + b: the magnitude of those terms.
        const double terms = (std::fabs(xs[i]) + std::fabs(want.mean[std::size_t(r)])) * want.rstd[std::size_t(r)] *
                             std::fabs(ws[std::size_t(j)]);
        const double scale = terms + (centered ? std::fabs(bs[std::size_t(j)]) : 0.0);
        check_y(ys[i], want.y[i], scale, row_tolerance<P>(), row_floor<P>(), r, j);
      }
      if (centered) check_mean(means[std::size_t(r)], want.mean[std::size_t(r)], 3.0, 3e-5, 0, r, 0);
      check_rstd(rstds[std::size_t(r)], want.rstd[std::size_t(r)], want.rstd[std::size_t(r)], 3e-5, 0, r, 0);
    }
    check_y.finish(), check_mean.finish(), check_rstd.finish();
  }
}

template <class P, class Run = library_norms, class W = P>
void backward_against_reference(bool centered, const std::vector<row_shape>& shapes = row_shapes()) {
  for (const auto [rows, n] : shapes) {
    const auto hx = random_matrix<P>(rows, n, std::uint32_t(400 + n), 1.0, 5.0);
    const auto hdy = random_matrix<P>(rows, n, std::uint32_t(500 + n), -1.0, 1.0);
    const auto hw = random_vector<W>(n, std::uint32_t(600 + n), 0.5, 1.5);
    const auto xs = as_doubles(hx), dys = as_doubles(hdy), ws = as_doubles(hw);
    // The saved statistics, as the forward stores them: fp32.
    const auto stats = norm_forward_reference(xs, ws, ws, rows, n, centered);
    host_tensor<float, vector_extents> hmean(rows), hrstd(rows);
    for (index_t r = 0; r < rows; ++r) {
      hmean(r) = float(stats.mean[std::size_t(r)]);
      hrstd(r) = float(stats.rstd[std::size_t(r)]);
    }
    const auto x = to_space(hx);
    const auto dy = to_space(hdy);
    const auto w = to_space(hw);
    const auto mean = to_space(hmean);
    const auto rstd = to_space(hrstd);
    space_tensor<P, matrix_extents> dx(rows, n);
    space_tensor<W, vector_extents> dw(n), db(n);
    poison(dx), poison(dw), poison(db);
    Run::backward(centered, dx, dw, db, dy, x, w, mean, rstd);

    const auto dxs = as_doubles(dx), dws = as_doubles(dw), dbs = as_doubles(db);
    const std::string what = std::string(centered ? "layernorm_backward " : "rmsnorm_backward ") +
                             precision_name<P>() + " rows " + std::to_string(rows) + " x " + std::to_string(n) +
                             ", " + precision_name<W>() + " weight";
    checker check_dx(what + ", dx"), check_dw(what + ", dweight"), check_db(what + ", dbias");
    std::vector<double> want_dw(std::size_t(n), 0), want_db(std::size_t(n), 0), scale_dw(std::size_t(n), 0),
        scale_db(std::size_t(n), 0);
    const double stat_eps = statistics_epsilon<P>();
    for (index_t r = 0; r < rows; ++r) {
      const double mu = centered ? double(hmean(r)) : 0.0, rs = double(hrstd(r));
      double sum_g = 0, sum_gx = 0, abs_g = 0, abs_gx = 0;
      for (index_t j = 0; j < n; ++j) {
        const std::size_t i = std::size_t(r * n + j);
        const double xhat = (xs[i] - mu) * rs, g = dys[i] * ws[std::size_t(j)];
        sum_g += g, sum_gx += g * xhat, abs_g += std::fabs(g), abs_gx += std::fabs(g * xhat);
        want_dw[std::size_t(j)] += dys[i] * xhat, scale_dw[std::size_t(j)] += std::fabs(dys[i] * xhat);
        want_db[std::size_t(j)] += dys[i], scale_db[std::size_t(j)] += std::fabs(dys[i]);
      }
      const double mean_g = centered ? sum_g / double(n) : 0.0, mean_gx = sum_gx / double(n);
      for (index_t j = 0; j < n; ++j) {
        const std::size_t i = std::size_t(r * n + j);
        const double xhat = (xs[i] - mu) * rs, g = dys[i] * ws[std::size_t(j)];
        const double want = rs * (g - mean_g - xhat * mean_gx);
        const double xhat_terms = (std::fabs(xs[i]) + std::fabs(mu)) * rs;  // xhat = x * rstd - mean * rstd
        const double scale = rs * (std::fabs(g) + std::fabs(mean_g) + xhat_terms * std::fabs(mean_gx));
        const double floor =
            row_floor<P>() + rs * stat_eps * ((centered ? abs_g : 0.0) + xhat_terms * abs_gx) / double(n);
        check_dx(dxs[i], want, scale, row_tolerance<P>(), floor, r, j);
      }
    }
    for (index_t j = 0; j < n; ++j) {
      check_dw(dws[std::size_t(j)], want_dw[std::size_t(j)], scale_dw[std::size_t(j)], row_tolerance<W>(),
               row_floor<W>(), 0, j);
      if (centered)
        check_db(dbs[std::size_t(j)], want_db[std::size_t(j)], scale_db[std::size_t(j)], row_tolerance<W>(),
                 row_floor<W>(), 0, j);
    }
    check_dx.finish(), check_dw.finish(), check_db.finish();
  }
}

}  // namespace

FUSOR_TEST_CASE("layernorm and rmsnorm: every row length, fp32/bf16/fp16, against fp64") {
  for (const bool centered : {true, false})
    for_each_precision([&](auto type) { forward_against_reference<typename decltype(type)::type>(centered); });
}

FUSOR_TEST_CASE("layernorm_backward and rmsnorm_backward: every row length against the analytic fp64 result") {
  for (const bool centered : {true, false})
    for_each_precision([&](auto type) { backward_against_reference<typename decltype(type)::type>(centered); });
}

// bf16 rows with fp32 weight and bias, and fp32 dweight and dbias (parameters
// kept in fp32 beside bf16 activations): a warp's rows, a block's, a
// cluster's (50304; accumulating dweight and dbias in its blocks) and rows
// read twice (300007).
FUSOR_TEST_CASE("layernorm and rmsnorm: bf16 rows with fp32 parameters and parameter gradients") {
  const std::vector<row_shape> shapes{{37, 33}, {7, 2049}, {3, 16385}, {2, 50304}, {2, 300007}};
  for (const bool centered : {true, false}) {
    forward_against_reference<bfloat16, library_norms, float>(centered, shapes);
    backward_against_reference<bfloat16, library_norms, float>(centered, shapes);
#if !FUSOR_HAS_CUDA
    forward_against_reference<bfloat16, emulated_norms, float>(centered, shapes);
    backward_against_reference<bfloat16, emulated_norms, float>(centered, shapes);
#endif
  }
}

#if !FUSOR_HAS_CUDA
// The CUDA kernels' code on the host: the forward's rows; the backward's rows
// accumulating dweight and dbias in shared memory (rows up to 16384 a block,
// up to 65536 a cluster's blocks, each its part), or dx alone then the column
// kernel (longer rows); the partial rows' sums.
FUSOR_TEST_CASE("layernorm's and rmsnorm's CUDA kernels under the SIMT emulator: every row length, both passes") {
  for (const bool centered : {true, false})
    for_each_precision([&](auto type) {
      forward_against_reference<typename decltype(type)::type, emulated_norms>(centered);
      backward_against_reference<typename decltype(type)::type, emulated_norms>(centered);
    });
}
#endif

namespace {
// 16-bit rows of whole 16-byte items at one aligned step, more of them than
// one wave of groups holds: the staged kernels, where each group copies its
// next row into shared memory while it reduces and writes this one. `shapes`
// are sized to pass a wave: the GPU's (H100/H200), or the emulator's two
// blocks or clusters. The backward pass's accumulating kernel stages its x
// and dy rows beside the accumulators (its grid is one wave already), a
// cluster's blocks each beside their part of the accumulators.
template <class Run>
void staged_against_reference(const std::vector<row_shape>& shapes, bool backward, bool counts_staged) {
  for (const bool centered : {true, false}) {
    const auto before = gpu::staged_launch_counter().load();
    if (backward) {
      backward_against_reference<bfloat16, Run>(centered, shapes);
      backward_against_reference<float16, Run>(centered, shapes);
    } else {
      forward_against_reference<bfloat16, Run>(centered, shapes);
      forward_against_reference<float16, Run>(centered, shapes);
    }
    if (counts_staged) CHECK(gpu::staged_launch_counter().load() - before == 2 * shapes.size());
  }
}
}  // namespace

#if !FUSOR_HAS_CUDA
FUSOR_TEST_CASE("layernorm's and rmsnorm's staged kernels under the SIMT emulator: warps, blocks and clusters") {
  staged_against_reference<emulated_norms>(staged_emulated_shapes(), false, true);
  staged_against_reference<emulated_norms>(staged_emulated_shapes(), true, true);
}
#endif
#if defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("layernorm's and rmsnorm's staged kernels: 16-bit rows, more than a wave of groups") {
  staged_against_reference<library_norms>(staged_gpu_shapes(), false, gpu_stages_rows());
  staged_against_reference<library_norms>(staged_gpu_shapes(), true, gpu_stages_rows());
}
#endif

// L = sum(R * y) over all rows, fp64 storage, forward and backward under the
// tested executor. dx is checked element by element with L over the perturbed
// row; dweight and dbias with L over every row. Central differences, h = 1e-5,
// tolerance 1e-6 relative (truncation ~1e-10, rounding ~1e-10).
FUSOR_TEST_CASE("norm backward passes match central differences of the forward (fp64)") {
  const index_t rows = 5;
  for (const bool centered : {true, false})
    for (const index_t n : {index_t(1), index_t(7), index_t(33), index_t(1500)}) {
      auto hx = random_matrix<double>(rows, n, std::uint32_t(700 + n), -1.0, 3.0);
      auto hw = random_vector<double>(n, std::uint32_t(800 + n), 0.5, 1.5);
      auto hb = random_vector<double>(n, std::uint32_t(900 + n), -1.0, 1.0);
      const auto hr = random_matrix<double>(rows, n, std::uint32_t(1000 + n), -1.0, 1.0);
      const auto weights = as_doubles(hr);
      executor ex{};
      // L over rows [first, last).
      auto loss = [&](index_t first, index_t last) {
        const auto x = to_space(hx);
        const auto w = to_space(hw);
        const auto b = to_space(hb);
        space_tensor<double, matrix_extents> y(rows, n);
        space_tensor<double, vector_extents> mean(rows), rstd(rows);
        if (centered) layernorm(y, mean, rstd, x, w, b, {epsilon}, ex);
        else rmsnorm(y, rstd, x, w, {epsilon}, ex);
        finish(ex);
        const auto ys = as_doubles(y);
        double l = 0;
        for (std::size_t i = std::size_t(first * n); i < std::size_t(last * n); ++i) l += weights[i] * ys[i];
        return l;
      };
      const auto x = to_space(hx);
      const auto r = to_space(hr);
      const auto w = to_space(hw);
      const auto b = to_space(hb);
      space_tensor<double, matrix_extents> y(rows, n), dx(rows, n);
      space_tensor<double, vector_extents> mean(rows), rstd(rows), dw(n), db(n);
      if (centered) {
        layernorm(y, mean, rstd, x, w, b, {epsilon}, ex);
        layernorm_backward(dx, dw, db, r, x, w, mean, rstd, ex);
      } else {
        rmsnorm(y, rstd, x, w, {epsilon}, ex);
        rmsnorm_backward(dx, dw, r, x, w, rstd, ex);
      }
      finish(ex);
      const auto dxs = as_doubles(dx), dws = as_doubles(dw), dbs = as_doubles(db);
      const double h = 1e-5;
      auto numeric = [&](double& element, index_t first, index_t last) {
        const double original = element;
        element = original + h;
        const double up = loss(first, last);
        element = original - h;
        const double down = loss(first, last);
        element = original;
        return (up - down) / (2 * h);
      };
      checker check(std::string(centered ? "layernorm" : "rmsnorm") + " central differences, length " + std::to_string(n));
      for (index_t sample = 0; sample < 6; ++sample) {
        const index_t row = sample % rows, column = (sample * 7919) % n;
        const double d = numeric(hx(row, column), row, row + 1);
        check(dxs[std::size_t(row * n + column)], d, std::max(1.0, std::fabs(d)), 1e-6, 0, row, column);
        const double dweight = numeric(hw(column), 0, rows);
        check(dws[std::size_t(column)], dweight, std::max(1.0, std::fabs(dweight)), 1e-6, 0, -1, column);
        if (centered) {
          const double dbias = numeric(hb(column), 0, rows);
          check(dbs[std::size_t(column)], dbias, std::max(1.0, std::fabs(dbias)), 1e-6, 0, -2, column);
        }
      }
      check.finish();
    }
}

FUSOR_TEST_CASE("layernorm: a NaN makes its row, its statistics and its dx row NaN") {
  for (const index_t n : {index_t(33), index_t(4097), index_t(20000)}) {
    const index_t rows = 3;
    auto hx = random_matrix<float>(rows, n, std::uint32_t(1100 + n), -2.0, 2.0);
    hx(1, n / 3) = std::nanf("");
    const auto hw = random_vector<float>(n, 12, 0.5, 1.5);
    const auto hb = random_vector<float>(n, 13, -1.0, 1.0);
    const auto x = to_space(hx);
    const auto w = to_space(hw);
    const auto b = to_space(hb);
    const auto dy = to_space(random_matrix<float>(rows, n, 14, -1.0, 1.0));
    space_tensor<float, matrix_extents> y(rows, n), dx(rows, n);
    space_tensor<float, vector_extents> mean(rows), rstd(rows), dw(n), db(n);
    executor ex{};
    layernorm(y, mean, rstd, x, w, b, {}, ex);
    layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex);
    finish(ex);
    const auto hy = to_host(y);
    const auto hdx = to_host(dx);
    const auto hmean = to_host(mean);
    const auto hrstd = to_host(rstd);
    index_t nan_row1 = 0, nan_elsewhere = 0;
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < n; ++j) {
        const index_t nans = std::isnan(hy(r, j)) + std::isnan(hdx(r, j));
        (r == 1 ? nan_row1 : nan_elsewhere) += nans;
      }
    INFO("length ", n);
    CHECK(nan_row1 == 2 * n);
    CHECK(nan_elsewhere == 0);
    CHECK(std::isnan(hmean(1)));
    CHECK(std::isnan(hrstd(1)));
    CHECK(!std::isnan(hmean(0)));
  }
}

// A transposed x (column stride = rows) and transposed y, rows one element
// off 16-byte alignment, weight and bias with stride 2, a rank-3 x with
// statistics in its leading shape [2, 3], and y = x in place; forward and
// backward, each against the row-major fp32 result.
namespace {
// Each against the same runner's plain row-major result.
template <class Run>
void odd_operands_against_plain_rows() {
  using strided_vector = view<float, vector_extents, strided, space>;
  for (const index_t n : {index_t(5), index_t(1000), index_t(20000), index_t(50304)}) {
    const index_t rows = 6;
    INFO("length ", n);
    const auto hx = random_matrix<float>(rows, n, std::uint32_t(1200 + n), -2.0, 2.0);
    const auto hdy = random_matrix<float>(rows, n, std::uint32_t(1300 + n), -1.0, 1.0);
    const auto hw = random_vector<float>(n, 15, 0.5, 1.5);
    const auto hb = random_vector<float>(n, 16, -1.0, 1.0);
    const auto x = to_space(hx);
    const auto dy = to_space(hdy);
    const auto w = to_space(hw);
    const auto b = to_space(hb);
    // The plain row-major result.
    space_tensor<float, matrix_extents> y(rows, n), dx(rows, n);
    space_tensor<float, vector_extents> mean(rows), rstd(rows), dw(n), db(n);
    Run::forward(true, y, mean, rstd, x, w, b);
    Run::backward(true, dx, dw, db, dy, x, w, mean, rstd);
    const auto ys = as_doubles(y), dxs = as_doubles(dx), dws = as_doubles(dw), dbs = as_doubles(db);
    auto compare = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
      checker check(what);
      for (std::size_t i = 0; i < want.size(); ++i)
        check(got[i], want[i], std::max(1.0, std::fabs(want[i])), 1e-5, 0, index_t(i), 0);
      check.finish();
    };

    // Transposed memory for x, dy, y, dx; weight and bias every other element.
    host_tensor<float, matrix_extents> hxt(n, rows), hdyt(n, rows);
    host_tensor<float, vector_extents> hw2(2 * n), hb2(2 * n);
    for (index_t r = 0; r < rows; ++r)
      for (index_t j = 0; j < n; ++j) hxt(j, r) = hx(r, j), hdyt(j, r) = hdy(r, j);
    for (index_t j = 0; j < n; ++j) hw2(2 * j) = hw(j), hb2(2 * j) = hb(j);
    const auto xt = to_space(hxt);
    const auto dyt = to_space(hdyt);
    const auto w2 = to_space(hw2);
    const auto b2 = to_space(hb2);
    const strided::mapping<vector_extents> every_other(vector_extents(n), ::cuda::std::array<index_t, 1>{2});
    const strided_vector ws(w2.data(), every_other), bs(b2.data(), every_other);
    space_tensor<float, matrix_extents> yt(n, rows), dxt(n, rows);
    Run::forward(true, transpose(yt.view()), mean, rstd, transpose(xt.view()), ws, bs);
    Run::backward(true, transpose(dxt.view()), dw, db, transpose(dyt.view()), transpose(xt.view()), ws, mean, rstd);
    auto untranspose = [&](const space_tensor<float, matrix_extents>& t) {
      const auto h = to_host(t);
      std::vector<double> out(std::size_t(rows * n));
      for (index_t r = 0; r < rows; ++r)
        for (index_t j = 0; j < n; ++j) out[std::size_t(r * n + j)] = h(j, r);
      return out;
    };
    compare(untranspose(yt), ys, "transposed y");
    compare(untranspose(dxt), dxs, "transposed dx");
    compare(as_doubles(dw), dws, "dweight from transposed rows");
    compare(as_doubles(db), dbs, "dbias from transposed rows");

    // Unaligned rows.
    const auto hflat = offset_in_memory(hx, 1);
    const auto flat = to_space(hflat);
    space_tensor<float, vector_extents> out_flat(rows * n + 1);
    using space_matrix = view<float, matrix_extents, row_major, space>;
    const space_matrix out_rows(out_flat.data() + 1, rows, n), in_rows(flat.data() + 1, rows, n);
    Run::forward(true, out_rows, mean, rstd, in_rows, w, b);
    auto got = as_doubles(out_flat);
    got.erase(got.begin());
    compare(got, ys, "unaligned rows");

    // Rank 3 in place, statistics shaped [2, 3].
    space_tensor<float, extents<index_t, 2, 3, dynamic>> x3(n);
    space_tensor<float, extents<index_t, 2, 3>> mean3, rstd3;
    copy(space_matrix(x3.data(), rows, n), x);
    Run::forward(true, x3, mean3, rstd3, x3, w, b);
    compare(as_doubles(x3), ys, "rank 3, in place");
    compare(as_doubles(mean3), as_doubles(mean), "rank-3 mean");
  }
}
}  // namespace

FUSOR_TEST_CASE("layernorm: strided, unaligned, rank-3 and in-place operands") {
  odd_operands_against_plain_rows<library_norms>();
#if !FUSOR_HAS_CUDA
  odd_operands_against_plain_rows<emulated_norms>();  // the CUDA kernels' strided and unaligned paths
#endif
}

FUSOR_TEST_CASE("layernorm_backward: dweight and dbias repeat bit for bit") {
  // On a GPU, 768: a block's accumulators in shared memory; 40000: a cluster's blocks' (sm_90);
  // 200003: the column kernel of rows read twice.
  for (const auto& [rows, n] : {std::pair<index_t, index_t>{300, 768}, {9, 40000}, {5, 200003}}) {
    const auto x = to_space(random_matrix<float>(rows, n, 21, -2.0, 2.0));
    const auto dy = to_space(random_matrix<float>(rows, n, 22, -1.0, 1.0));
    const auto w = to_space(random_vector<float>(n, 23, 0.5, 1.5));
    const auto b = to_space(random_vector<float>(n, 24, -1.0, 1.0));
    space_tensor<float, matrix_extents> y(rows, n), dx(rows, n);
    space_tensor<float, vector_extents> mean(rows), rstd(rows), dw1(n), db1(n), dw2(n), db2(n);
    executor ex{};
    layernorm(y, mean, rstd, x, w, b, {}, ex);
    layernorm_backward(dx, dw1, db1, dy, x, w, mean, rstd, ex);
    layernorm_backward(dx, dw2, db2, dy, x, w, mean, rstd, ex);
    finish(ex);
    const auto a = to_host(dw1);
    const auto c = to_host(dw2);
    const auto d = to_host(db1);
    const auto e = to_host(db2);
    index_t different = 0;
    for (index_t j = 0; j < n; ++j) different += a(j) != c(j) || d(j) != e(j);
    CHECK(different == 0);
  }
}

FUSOR_TEST_CASE("layernorm_backward with no rows: zero parameter gradients") {
  const index_t n = 37;
  space_tensor<float, matrix_extents> x(0, n), dy(0, n), dx(0, n), y(0, n);
  space_tensor<float, vector_extents> mean(0), rstd(0), dw(n), db(n);
  const auto w = to_space(random_vector<float>(n, 31, 0.5, 1.5));
  const auto b = to_space(random_vector<float>(n, 32, -1.0, 1.0));
  poison(dw), poison(db);
  executor ex{};
  layernorm(y, mean, rstd, x, w, b, {}, ex);
  layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, ex);
  finish(ex);
  const auto dws = as_doubles(dw);
  const auto dbs = as_doubles(db);
  CHECK(std::count(dws.begin(), dws.end(), 0.0) == n);
  CHECK(std::count(dbs.begin(), dbs.end(), 0.0) == n);
}

FUSOR_TEST_CASE("layernorm and rmsnorm: shape errors name both shapes") {
  space_tensor<float, matrix_extents> x(3, 4), y(3, 4), wrong(3, 5);
  space_tensor<float, vector_extents> w(4), w5(5), mean(3), mean2(2), dw(4);
  executor ex{};
  expect_error<shape_error>([&] { layernorm(wrong, mean, mean, x, w, w, {}, ex); }, {"layernorm", "[3, 5]", "[3, 4]"});
  expect_error<shape_error>([&] { layernorm(y, mean, mean, x, w5, w, {}, ex); }, {"layernorm", "weight", "[5]", "[3, 4]"});
  expect_error<shape_error>([&] { layernorm(y, mean, mean, x, w, w5, {}, ex); }, {"layernorm", "bias", "[5]", "[3, 4]"});
  expect_error<shape_error>([&] { layernorm(y, mean2, mean, x, w, w, {}, ex); }, {"layernorm", "mean", "[2]", "[3, 4]"});
  expect_error<shape_error>([&] { rmsnorm(y, mean2, x, w, {}, ex); }, {"rmsnorm", "rstd", "[2]", "[3, 4]"});
  expect_error<shape_error>([&] { layernorm_backward(y, dw, dw, wrong, x, w, mean, mean, ex); },
                            {"layernorm_backward", "[3, 5]", "[3, 4]"});
  expect_error<shape_error>([&] { rmsnorm_backward(y, w5, y, x, w, mean, ex); }, {"rmsnorm_backward", "dweight", "[5]"});
}

}  // namespace test_layernorm
