// Reductions against an fp64 host reference: every kind, over the whole tensor
// and along each axis (kept and dropped) of 1-D, 2-D and 3-D inputs, in fp32,
// bf16 and fp16, row- and column-major, transposed (strided) views and fused
// expressions, at odd sizes (1, 3, 1023, 2^20 + 7, long and short axes).
// In host builds the same checks run the CUDA kernels' code under the SIMT
// emulator too (sizes up to 2^16 + 7 there).
//
// Tolerance of a sum of n terms t_i (accumulated in fp32 for every precision
// here, eps = 2^-23):
//     |got - want| <= 2 eps sqrt(n) (||t||_2 + |sum t|) + r |want|,
// r being the rounding of the destination's element (fusor_test::tolerance).
// The first part is n roundings, each at most eps times a partial sum,
// adding up like a random walk (sqrt(n)); a partial sum is bounded by the
// drift of the terms (|sum t|) plus their spread (||t||_2), whatever order a
// backend adds in. mean divides it by n, norm by 2 norm. amax, amin, argmax
// and argmin are exact.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fusor/kernels/reduce.hpp>

#include "kernels/reduce_kernels_emulated.hpp"
#include "support/fusor_test.hpp"

using namespace fusor_test;

namespace {

using shape_list = std::vector<index_t>;
constexpr double accumulate_eps = 1.1920928955078125e-07;  // fp32

struct expected {
  double value;
  double slack;  // allowed accumulation error
};

constexpr reduction_kind every_kind[] = {reduction_kind::sum,    reduction_kind::mean,   reduction_kind::max,
                                         reduction_kind::min,    reduction_kind::argmax, reduction_kind::argmin,
                                         reduction_kind::sum_of_squares, reduction_kind::norm};

template <class F>
void for_each_kind(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f.template operator()<every_kind[I]>(), ...);
  }(std::make_index_sequence<std::size(every_kind)>{});
}

// fusor's reduction of kind K, any of its three forms.
template <reduction_kind K, class... A>
auto reduce_as(A&&... a) {
  if constexpr (K == reduction_kind::sum) return fusor::sum(std::forward<A>(a)...);
  else if constexpr (K == reduction_kind::mean) return fusor::mean(std::forward<A>(a)...);
  else if constexpr (K == reduction_kind::max) return fusor::amax(std::forward<A>(a)...);
  else if constexpr (K == reduction_kind::min) return fusor::amin(std::forward<A>(a)...);
  else if constexpr (K == reduction_kind::argmax) return fusor::argmax(std::forward<A>(a)...);
  else if constexpr (K == reduction_kind::argmin) return fusor::argmin(std::forward<A>(a)...);
  else if constexpr (K == reduction_kind::sum_of_squares) return fusor::sum_of_squares(std::forward<A>(a)...);
  else return fusor::norm(std::forward<A>(a)...);
}

// How a test reduces: the library's calls on the tested executor, or in host
// builds the CUDA kernels' code under the SIMT emulator
// (reduce_kernels_emulated.hpp).
struct library_reduce {
  static constexpr index_t large = index_t(1) << 20;  // the longest tensors and axes: this plus a few
  template <reduction_kind K, class Out, class In>
  static void into(const Out& out, const In& in) {
    executor ex{};
    reduce_as<K>(out, in, ex);
    finish(ex);
  }
  template <reduction_kind K, class In>
  static auto value(const In& in) {
    return reduce_as<K>(in, executor{});
  }
  template <reduction_kind K, class Out, class In>
  static void along(const Out& out, const In& in, int axis) {
    executor ex{};
    reduce_as<K>(out, in, axis, ex);
    finish(ex);
  }
};
#if !FUSOR_HAS_CUDA
struct emulated_reduce {
  // Long enough for many blocks and split axes on the emulated GPU of
  // reduce_kernels_emulated.hpp (each element costs the emulator far more).
  static constexpr index_t large = index_t(1) << 16;
  template <reduction_kind K, class Out, class In>
  static void into(const Out& out, const In& in) {
    reduce_test::emulated::into<K>(out, in);
  }
  template <reduction_kind K, class In>
  static auto value(const In& in) {
    return reduce_test::emulated::value<K>(in);
  }
  template <reduction_kind K, class Out, class In>
  static void along(const Out& out, const In& in, int axis) {
    reduce_test::emulated::along<K>(out, in, axis);
  }
};
#endif

// Elements of a host view in logical row-major order, as double.
template <class V>
std::vector<double> logical_values(const V& v) {
  constexpr std::size_t R = V::rank;
  if constexpr (R == 0) {
    return {to_double(v.data()[0])};
  } else {
    std::vector<double> out;
    ::cuda::std::array<index_t, R> idx{};
    for (index_t n = 0; n < v.size(); ++n) {
      out.push_back(to_double(v.data()[v.offset_of(idx)]));
      for (std::size_t k = R; k-- > 0;) {
        if (++idx[k] < v.extent(k)) break;
        idx[k] = 0;
      }
    }
    return out;
  }
}

// The fp64 reference of kind K along `axis` (-1: everything) of row-major `x`
// of `shape`, in row-major order of the remaining axes.
// `element_error`, when given, bounds how far each element the kernel reads may
// lie from x (an expression's own rounding, which differs between a host loop
// and a GPU kernel that contracts a * b + c into one fma); it widens every slack.
std::vector<expected> reference(reduction_kind kind, const std::vector<double>& x, const shape_list& shape, int axis,
                                const std::vector<double>& element_error = {}) {
  index_t outer = 1, length = 1, inner = 1;
  for (int k = 0; k != int(shape.size()); ++k) {
    if (axis < 0 || k == axis) length *= shape[k];
    else if (k < axis) outer *= shape[k];
    else inner *= shape[k];
  }
  std::vector<expected> out;
  for (index_t o = 0; o < outer; ++o)
    for (index_t i = 0; i < inner; ++i) {
      double sum = 0, squares = 0, sum_sq_terms = 0, sum_quartic = 0;  // the last two: ||t||^2 of sum and squares
      double best_max = -INFINITY, best_min = INFINITY;
      double error_sum = 0, error_max = 0, error_squares = 0;  // bounds on the elements' own error
      index_t arg_max = -1, arg_min = -1;
      bool nan = false;
      for (index_t r = 0; r < length; ++r) {
        const double v = x[(o * length + r) * inner + i];
        sum += v, squares += v * v, sum_sq_terms += v * v, sum_quartic += v * v * v * v;
        if (!element_error.empty()) {
          const double e = element_error[(o * length + r) * inner + i];
          error_sum += e, error_max = std::max(error_max, e), error_squares += e * (2 * std::fabs(v) + e);
        }
        if (std::isnan(v)) {  // the first NaN is both the maximum and the minimum
          if (!nan) arg_max = arg_min = r;
          nan = true;
        } else if (!nan) {  // ties: the first index
          if (arg_max < 0 || v > best_max) best_max = v, arg_max = r;
          if (arg_min < 0 || v < best_min) best_min = v, arg_min = r;
        }
      }
      const double n = double(length), walk = 2 * accumulate_eps * std::sqrt(n);
      const double slack_sum = walk * (std::sqrt(sum_sq_terms) + std::fabs(sum)) + error_sum;
      const double slack_squares = walk * (std::sqrt(sum_quartic) + squares) + error_squares;
      switch (kind) {
        case reduction_kind::sum: out.push_back({sum, slack_sum}); break;
        case reduction_kind::mean: out.push_back({sum / n, slack_sum / n}); break;
        case reduction_kind::max: out.push_back({nan ? NAN : best_max, error_max}); break;
        case reduction_kind::min: out.push_back({nan ? NAN : best_min, error_max}); break;
        case reduction_kind::argmax: out.push_back({double(arg_max), 0}); break;
        case reduction_kind::argmin: out.push_back({double(arg_min), 0}); break;
        case reduction_kind::sum_of_squares: out.push_back({squares, slack_squares}); break;
        case reduction_kind::norm:
          out.push_back({std::sqrt(squares), squares > 0 ? slack_squares / (2 * std::sqrt(squares)) : 0});
      }
    }
  return out;
}

const char* name_of(reduction_kind kind) {
  constexpr const char* names[] = {"sum", "mean", "sum_of_squares", "norm", "amax", "amin", "argmax", "argmin"};
  return names[int(kind)];
}

bool matches(double got, const expected& want, double rounding) {
  if (std::isnan(want.value)) return std::isnan(got);
  if (std::isinf(want.value)) return got == want.value;
  return std::fabs(got - want.value) <= rounding * std::fabs(want.value) + want.slack + 1e-300;
}

void expect_all(const std::vector<double>& got, const std::vector<expected>& want, double rounding, const char* what,
                reduction_kind kind, int axis) {
  REQUIRE(got.size() == want.size());
  index_t misses = 0, first = -1;
  for (std::size_t m = 0; m < got.size(); ++m)
    if (!matches(got[m], want[m], rounding) && misses++ == 0) first = index_t(m);
  INFO(std::string(what), ": ", std::string(name_of(kind)), " axis ", axis, ": ", misses, " of ", got.size(),
       " results differ; first at ", first, ": got ", first >= 0 ? got[first] : 0.0, ", want ",
       first >= 0 ? want[first].value : 0.0, " +- ", first >= 0 ? want[first].slack : 0.0);
  CHECK(misses == 0);
}

// Poisons a destination (NaN, or -7 for integers) so an unwritten element shows.
template <class T>
void poison_any(const T& t) {
  using element = typename T::element_type;
  if constexpr (std::is_integral_v<element>) {
    host_tensor<element, typename T::extents_type, typename T::layout_type> h(t.extents());
    for (index_t i = 0; i < h.size(); ++i) h.data()[i] = element(-7);
    copy(t, h);
  } else {
    poison(t);
  }
}

template <reduction_kind K, class OutP>
using destination_precision = std::conditional_t<K == reduction_kind::argmax || K == reduction_kind::argmin,
                                                 std::int64_t, OutP>;

// Every kind of `in` (a view or expression in the tested space, whose logical
// values are `values` of shape `shape`): over the whole tensor into a rank-0
// destination and as a value, then along every axis, kept and dropped.
// `element_error`: empty where fusor's elements are exactly `values`; else a
// bound per element on how far they may lie from them (an expression's own
// rounding), which widens every check's slack and leaves argmax/argmin out
// (a near tie may then go either way).
template <class OutP, std::size_t R, class Run, class In>
void check_every_kind(const In& in, const std::vector<double>& values, const shape_list& shape, const char* what,
                      const std::vector<double>& element_error = {}) {
  const bool values_exact = element_error.empty();
  for_each_kind([&]<reduction_kind K>() {
    if (!values_exact && (K == reduction_kind::argmax || K == reduction_kind::argmin)) return;
    using D = destination_precision<K, OutP>;
    const double rounding = std::is_integral_v<D> ? 0.0 : tolerance<D>();
    {
      space_tensor<D, extents<index_t>> out;
      poison_any(out);
      Run::template into<K>(out, in);
      const auto want = reference(K, values, shape, -1, element_error);
      expect_all(logical_values(to_host(out).view()), want, rounding, what, K, -1);
      const double value = double(Run::template value<K>(in));
      expect_all({value}, want, rounding, what, K, -1);
    }
    for (int axis = 0; axis != int(R); ++axis) {
      ::cuda::std::array<index_t, R> kept{};
      ::cuda::std::array<index_t, (R > 1 ? R - 1 : 1)> dropped{};
      for (int k = 0, j = 0; k != int(R); ++k) {
        kept[k] = k == axis ? 1 : shape[k];
        if (k != axis) dropped[j++] = shape[k];
      }
      const auto want = reference(K, values, shape, axis, element_error);
      space_tensor<D, dextents<index_t, R>> keep(kept);
      poison_any(keep);
      Run::template along<K>(keep, in, axis);
      expect_all(logical_values(to_host(keep).view()), want, rounding, what, K, axis);
      if constexpr (R > 1) {
        space_tensor<D, dextents<index_t, R - 1>> drop(dropped);
        poison_any(drop);
        Run::template along<K>(drop, in, axis - int(R));  // negative axes count from the end
        expect_all(logical_values(to_host(drop).view()), want, rounding, what, K, axis);
      }
    }
  });
}

std::vector<index_t> dims(std::initializer_list<index_t> d) { return d; }

template <class P, std::size_t R, class L = row_major>
host_tensor<P, dextents<index_t, R>, L> random_tensor(const shape_list& shape, std::uint32_t seed) {
  ::cuda::std::array<index_t, R> e{};
  for (std::size_t k = 0; k != R; ++k) e[k] = shape[k];
  host_tensor<P, dextents<index_t, R>, L> h{dextents<index_t, R>(e)};
  fill_random(h, seed);
  return h;
}

}  // namespace

template <class Run>
void whole_1d() {
  std::uint32_t seed = 300;
  for (index_t n : {index_t(1), index_t(3), index_t(1023), Run::large + 7}) {
    INFO("n = ", n);
    const auto h32 = random_tensor<float, 1>(dims({n}), seed++);
    const auto h16 = random_tensor<bfloat16, 1>(dims({n}), seed++);
    const auto hh = random_tensor<float16, 1>(dims({n}), seed++);
    const auto x32 = to_space(h32);
    const auto x16 = to_space(h16);
    const auto xh = to_space(hh);
    check_every_kind<float, 1, Run>(x32.view(), logical_values(h32.view()), dims({n}), "fp32");
    check_every_kind<float, 1, Run>(x16.view(), logical_values(h16.view()), dims({n}), "bf16 -> fp32");
    check_every_kind<float, 1, Run>(xh.view(), logical_values(hh.view()), dims({n}), "fp16 -> fp32");
    if (n < 2048) {  // results stored in the input's precision (larger sums of squares overflow fp16)
      check_every_kind<bfloat16, 1, Run>(x16.view(), logical_values(h16.view()), dims({n}), "bf16");
      check_every_kind<float16, 1, Run>(xh.view(), logical_values(hh.view()), dims({n}), "fp16");
    }
  }
}

template <class Run>
void whole_unaligned_and_mixed() {
  // On the GPU a contiguous input is read 16 bytes at a time when every pointer
  // is 16-byte aligned: a view starting one element in is not (elements one by
  // one), and x * y + 1 over bf16 x and fp32 y reads 8 elements a load (16
  // bytes of x, 32 of y). Sizes leave a tail past the last full vector.
  std::uint32_t seed = 350;
  for (index_t n : {index_t(13), index_t(1029), Run::large + 5}) {
    INFO("n = ", n);
    const auto h16 = random_tensor<bfloat16, 1>(dims({n + 1}), seed++);
    const auto h32 = random_tensor<float, 1>(dims({n + 1}), seed++);
    const auto x16 = to_space(h16);
    const auto x32 = to_space(h32);
    const auto inner16 = slice<0>(x16.view(), 1, n + 1);
    check_every_kind<float, 1, Run>(inner16, logical_values(slice<0>(h16.view(), 1, n + 1)), dims({n}), "bf16, one in");
    const auto x = slice<0>(x16.view(), 0, n);
    const auto y = slice<0>(x32.view(), 0, n);
    const auto vx = logical_values(slice<0>(h16.view(), 0, n)), vy = logical_values(slice<0>(h32.view(), 0, n));
    std::vector<double> fused(vx.size()), fused_error(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      fused[i] = vx[i] * vy[i] + 1.0;
      fused_error[i] = 0x1p-23 * (std::fabs(vx[i] * vy[i]) + 1.0);  // one or two fp32 roundings
    }
    check_every_kind<float, 1, Run>(x * y + 1, fused, dims({n}), "bf16 x * fp32 y + 1", fused_error);
  }
}

template <class Run>
void along_2d() {
  std::uint32_t seed = 400;
  // Rows of 129 and 1023 start on and off 16-byte boundaries (on the GPU: vector
  // loads, or one element at a time); rows of 2048 all on one.
  for (const auto& shape : {dims({1, 1}), dims({3, 1023}), dims({1023, 3}), dims({1, 1023}), dims({1023, 1}),
                            dims({67, 129}), dims({16, 2048}), dims({3, Run::large + 7})}) {
    INFO("shape [", shape[0], ", ", shape[1], "]");
    const auto h32 = random_tensor<float, 2>(shape, seed++);
    const auto h16 = random_tensor<bfloat16, 2>(shape, seed++);
    const auto hh = random_tensor<float16, 2>(shape, seed++);
    const auto x32 = to_space(h32);
    const auto x16 = to_space(h16);
    const auto xh = to_space(hh);
    check_every_kind<float, 2, Run>(x32.view(), logical_values(h32.view()), shape, "fp32");
    check_every_kind<float, 2, Run>(x16.view(), logical_values(h16.view()), shape, "bf16 -> fp32");
    check_every_kind<float, 2, Run>(xh.view(), logical_values(hh.view()), shape, "fp16 -> fp32");
    // Two widths alike laid out: on the GPU a row that starts on a 16-byte
    // boundary is read 8 elements a load (16 bytes of bf16 x, 32 of fp32 y).
    const auto vx = logical_values(h16.view()), vy = logical_values(h32.view());
    std::vector<double> fused(vx.size()), fused_error(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      fused[i] = vx[i] * vy[i] + 1.0;
      fused_error[i] = 0x1p-23 * (std::fabs(vx[i] * vy[i]) + 1.0);  // one or two fp32 roundings
    }
    check_every_kind<float, 2, Run>(x16.view() * x32.view() + 1, fused, shape, "bf16 x * fp32 y + 1", fused_error);
  }
}

template <class Run>
void along_3d() {
  std::uint32_t seed = 500;
  for (const auto& shape : {dims({5, 7, 33}), dims({2, 1, 1023}), dims({1023, 3, 2}), dims({1, 1, 1})}) {
    INFO("shape [", shape[0], ", ", shape[1], ", ", shape[2], "]");
    const auto h32 = random_tensor<float, 3>(shape, seed++);
    const auto h16 = random_tensor<bfloat16, 3>(shape, seed++);
    const auto x32 = to_space(h32);
    const auto x16 = to_space(h16);
    check_every_kind<float, 3, Run>(x32.view(), logical_values(h32.view()), shape, "fp32");
    check_every_kind<float, 3, Run>(x16.view(), logical_values(h16.view()), shape, "bf16 -> fp32");
  }
}

template <class Run>
void strided_layouts() {
  std::uint32_t seed = 600;
  for (const auto& shape : {dims({37, 129}), dims({1025, 3}), dims({3, 1025})}) {
    INFO("shape [", shape[0], ", ", shape[1], "]");
    const auto hc = random_tensor<float, 2, col_major>(shape, seed++);
    const auto xc = to_space(hc);
    check_every_kind<float, 2, Run>(xc.view(), logical_values(hc.view()), shape, "column-major fp32");
    // Read through the transpose of a row-major [cols, rows]: strides (1, rows).
    const auto ht = random_tensor<float16, 2>(dims({shape[1], shape[0]}), seed++);
    const auto xt = to_space(ht);
    check_every_kind<float, 2, Run>(transpose(xt.view()), logical_values(transpose(ht.view())), shape,
                               "transposed fp16");
  }
}

template <class Run>
void fused() {
  std::uint32_t seed = 700;
  for (const auto& shape : {dims({3, 1023}), dims({1023, 5}), dims({2, Run::large / 2 + 3})}) {
    const auto hx = random_tensor<bfloat16, 2>(shape, seed++);
    const auto hy = random_tensor<float, 2, col_major>(shape, seed++);
    const auto x = to_space(hx);
    const auto y = to_space(hy);
    const auto vx = logical_values(hx.view()), vy = logical_values(hy.view());
    // sum(out, x * y + 1): mixed precisions and layouts in one expression,
    // against the exact value. Evaluated in fp32, each element is within one
    // rounding of it on the GPU (one fma) and two on the host (a product, then
    // a sum); 2^-23 (|x y| + 1) bounds both.
    std::vector<double> fused(vx.size()), fused_error(vx.size()), difference(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      fused[i] = vx[i] * vy[i] + 1.0;
      fused_error[i] = 0x1p-23 * (std::fabs(vx[i] * vy[i]) + 1.0);
      difference[i] = double(float(vx[i]) - float(vy[i]));  // one rounding, the same everywhere
    }
    check_every_kind<float, 2, Run>(x * y + 1, fused, shape, "x * y + 1", fused_error);
    // norm of a difference, e.g. a distance between parameters.
    check_every_kind<float, 2, Run>(x - y, difference, shape, "x - y");
  }
}

FUSOR_TEST_CASE("reductions of a whole 1-D tensor: every kind, fp32/bf16/fp16, odd sizes") {
  whole_1d<library_reduce>();
}
FUSOR_TEST_CASE("whole-tensor reductions: a view one element in, and an expression of two precisions alike laid out") {
  whole_unaligned_and_mixed<library_reduce>();
}
FUSOR_TEST_CASE("reductions along each axis of 2-D inputs, kept and dropped, long and short axes") {
  along_2d<library_reduce>();
}
FUSOR_TEST_CASE("reductions along each axis of 3-D inputs") { along_3d<library_reduce>(); }
FUSOR_TEST_CASE("reductions of column-major and transposed (strided) inputs") { strided_layouts<library_reduce>(); }
FUSOR_TEST_CASE("fused expressions are reduced without being materialised") { fused<library_reduce>(); }

#if !FUSOR_HAS_CUDA
// The CUDA kernels' code (blocks of 256 threads over a whole tensor, a warp
// per row, threads per column, long axes split in pieces, 16-byte loads four
// at a time) on the host: no GPU needed to find a wrong lane, tail or barrier.
FUSOR_TEST_CASE("the CUDA reductions under the SIMT emulator: whole 1-D tensors") { whole_1d<emulated_reduce>(); }
FUSOR_TEST_CASE("the CUDA reductions under the SIMT emulator: unaligned views and mixed-precision expressions") {
  whole_unaligned_and_mixed<emulated_reduce>();
}
FUSOR_TEST_CASE("the CUDA reductions under the SIMT emulator: along each axis of 2-D inputs") {
  along_2d<emulated_reduce>();
}
FUSOR_TEST_CASE("the CUDA reductions under the SIMT emulator: along each axis of 3-D inputs") {
  along_3d<emulated_reduce>();
}
FUSOR_TEST_CASE("the CUDA reductions under the SIMT emulator: column-major and transposed inputs") {
  strided_layouts<emulated_reduce>();
}
FUSOR_TEST_CASE("the CUDA reductions under the SIMT emulator: fused expressions") { fused<emulated_reduce>(); }
#endif
