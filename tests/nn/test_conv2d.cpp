// nn::conv2d, nn::max_pool2d and nn::flatten under every executor: forward
// and backward against plain double loops (the convolution's seven-loop
// definition), fp32 and bf16, odd sizes; and a small CNN's forward and
// backward, layer by layer against the same loops. On the GPU the bias
// gradients (the convolution's and the linear layer's) run both ways: fused in
// cuBLASLt's epilogue, and summed apart by fusor (its fallback where cuBLASLt has
// no algorithm with the epilogue).
#include <cmath>
#include <string>
#include <vector>

#include "nn/nn_test.hpp"
#include "support/fusor_test.hpp"

#include <fusor/kernels/matmul_bias_gradient.hpp>
#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/max_pool2d.hpp>
#include <fusor/nn/network.hpp>

using namespace fusor;
using namespace fusor_test;

namespace {
using values = std::vector<double>;
using nn_test::parameter_values;
using flat = dextents<index_t, 1>;

struct image_shape {
  index_t batch, channels, height, width;
  index_t size() const { return batch * channels * height * width; }
};

// y[n, o, oh, ow] = b[o] + sum_{c, i, j} w[o, c, i, j] x[n, c, oh S - P + i, ow S - P + j] (zero outside).
values conv_reference(const values& x, image_shape in, const values& w, const values& b, index_t outs, index_t k,
                      index_t s, index_t p, image_shape& out) {
  out = {in.batch, outs, (in.height + 2 * p - k) / s + 1, (in.width + 2 * p - k) / s + 1};
  values y(std::size_t(out.size()));
  for (index_t n = 0; n < in.batch; ++n)
    for (index_t o = 0; o < outs; ++o)
      for (index_t oh = 0; oh < out.height; ++oh)
        for (index_t ow = 0; ow < out.width; ++ow) {
          double sum = b[std::size_t(o)];
          for (index_t c = 0; c < in.channels; ++c)
            for (index_t i = 0; i < k; ++i)
              for (index_t j = 0; j < k; ++j) {
                const index_t h = oh * s - p + i, v = ow * s - p + j;
                if (h < 0 || h >= in.height || v < 0 || v >= in.width) continue;
                sum += w[std::size_t(((o * in.channels + c) * k + i) * k + j)] *
                       x[std::size_t(((n * in.channels + c) * in.height + h) * in.width + v)];
              }
          y[std::size_t(((n * outs + o) * out.height + oh) * out.width + ow)] = sum;
        }
  return y;
}

// The same loops, transposed: dw, db and dx from dy.
void conv_backward_reference(const values& x, image_shape in, const values& w, const values& dy, image_shape out,
                             index_t k, index_t s, index_t p, values& dw, values& db, values& dx) {
  dw.assign(std::size_t(out.channels * in.channels * k * k), 0.0);
  db.assign(std::size_t(out.channels), 0.0);
  dx.assign(std::size_t(in.size()), 0.0);
  for (index_t n = 0; n < in.batch; ++n)
    for (index_t o = 0; o < out.channels; ++o)
      for (index_t oh = 0; oh < out.height; ++oh)
        for (index_t ow = 0; ow < out.width; ++ow) {
          const double g = dy[std::size_t(((n * out.channels + o) * out.height + oh) * out.width + ow)];
          db[std::size_t(o)] += g;
          for (index_t c = 0; c < in.channels; ++c)
            for (index_t i = 0; i < k; ++i)
              for (index_t j = 0; j < k; ++j) {
                const index_t h = oh * s - p + i, v = ow * s - p + j;
                if (h < 0 || h >= in.height || v < 0 || v >= in.width) continue;
                const std::size_t wi = std::size_t(((o * in.channels + c) * k + i) * k + j);
                const std::size_t xi = std::size_t(((n * in.channels + c) * in.height + h) * in.width + v);
                dw[wi] += g * x[xi];
                dx[xi] += g * w[wi];
              }
        }
}

// Max pooling (first maximum wins) and its backward, routing dy to the maxima.
values pool_reference(const values& x, image_shape in, index_t window, index_t s, image_shape& out,
                      std::vector<index_t>& where) {
  out = {in.batch, in.channels, (in.height - window) / s + 1, (in.width - window) / s + 1};
  values y(std::size_t(out.size()));
  where.assign(y.size(), 0);
  for (index_t plane = 0; plane < in.batch * in.channels; ++plane)
    for (index_t oh = 0; oh < out.height; ++oh)
      for (index_t ow = 0; ow < out.width; ++ow) {
        index_t best = plane * in.height * in.width + oh * s * in.width + ow * s;
        for (index_t i = 0; i < window; ++i)
          for (index_t j = 0; j < window; ++j) {
            const index_t at = plane * in.height * in.width + (oh * s + i) * in.width + ow * s + j;
            if (x[std::size_t(at)] > x[std::size_t(best)]) best = at;
          }
        const std::size_t o = std::size_t((plane * out.height + oh) * out.width + ow);
        y[o] = x[std::size_t(best)];
        where[o] = best;
      }
  return y;
}
values pool_backward_reference(const values& dy, const std::vector<index_t>& where, index_t input_size) {
  values dx(std::size_t(input_size), 0.0);
  for (std::size_t o = 0; o < dy.size(); ++o) dx[std::size_t(where[o])] += dy[o];
  return dx;
}

// Random values stored in P, returned as what was stored.
template <class P>
host_tensor<P, flat> random_values(index_t n, std::uint32_t seed, values& stored) {
  host_tensor<P, flat> h(n);
  fill_random(h, seed, -1.5, 1.5);
  stored.resize(std::size_t(n));
  for (index_t i = 0; i < n; ++i) stored[std::size_t(i)] = to_double(h.data()[i]);
  return h;
}
// The same shape as a view of the tested space, over host memory (to copy into it).
template <class V>
auto host_view_like(const V& v, const void* data) {
  using element = typename V::element_type;
  return view<typename V::precision, typename V::extents_type, row_major, host_space>(
      static_cast<element*>(const_cast<void*>(data)), v.mapping());
}

// One conv2d as a network: forward and backward against the loops.
template <class P, std::size_t In, std::size_t Out, std::size_t K, std::size_t S, std::size_t Pad, std::size_t H,
          std::size_t W>
void check_conv(index_t batch, double tolerance, bool with_backward) {
  using net_t = nn::network<nn::sequential<nn::features<In, H, W>, nn::conv2d<In, Out, K, S, Pad>>, P, space>;
  executor ex{};
  net_t net(batch + 2, {.seed = 3});
  const image_shape in{batch, In, H, W};
  values x, dy_values;
  const auto hx = random_values<P>(in.size(), 11, x);
  auto dx_space = to_space(hx);  // poisoned below: the input gradient
  auto x_space = to_space(hx);
  poison(net.output_gradient());
  const auto y = as_doubles(net.forward(typename net_t::input_view(x_space.data(), batch), ex));
  const auto p = parameter_values(net, false);
  image_shape out{};
  const auto want = conv_reference(x, in, p[0], p[1], index_t(Out), index_t(K), index_t(S), index_t(Pad), out);
  const std::string what = "conv2d<" + std::to_string(In) + ", " + std::to_string(Out) + ", " + std::to_string(K) +
                           ", " + std::to_string(S) + ", " + std::to_string(Pad) + "> on " + std::to_string(H) + "x" +
                           std::to_string(W);
  check_close(y, want, tolerance, what + " forward");
  if (!with_backward) return;

  const auto hdy = random_values<P>(out.size(), 12, dy_values);
  copy(net.output_gradient(), host_view_like(net.output_gradient(), hdy.data()));
  poison(dx_space);
  net.backward(ex, typename net_t::input_view(dx_space.data(), batch));
  const auto g = parameter_values(net, true);
  values dw, db, dx;
  conv_backward_reference(x, in, p[0], dy_values, out, index_t(K), index_t(S), index_t(Pad), dw, db, dx);
  check_close(g[0], dw, tolerance, what + " dweight");
  check_close(g[1], db, tolerance, what + " dbias");
  check_close(as_doubles(dx_space), dx, tolerance, what + " dx");
}
}  // namespace

FUSOR_TEST_CASE("conv2d: forward and backward against the seven-loop definition, fp32") {
  check_conv<fp32, 3, 4, 3, 2, 1, 7, 9>(5, 1e-5, true);
  check_conv<fp32, 2, 5, 3, 1, 1, 6, 5>(3, 1e-5, true);
  check_conv<fp32, 3, 2, 2, 3, 2, 8, 7>(2, 1e-5, true);  // stride larger than the kernel
  check_conv<fp32, 4, 3, 1, 1, 0, 3, 4>(4, 1e-5, true);  // 1 x 1
  // dweight sums 3 * 784 products here: fp32 rounding grows with the count.
  check_conv<fp32, 1, 8, 3, 1, 1, 28, 28>(3, 1e-4, true);
}

FUSOR_TEST_CASE("conv2d: bf16 forward and backward within bf16 rounding") {
  // Two roundings to bf16 (the product, then with the bias) of sums of ~30 terms.
  check_conv<bf16, 3, 4, 3, 2, 1, 7, 9>(5, 4e-2, true);
  check_conv<bf16, 2, 6, 3, 1, 0, 9, 6>(2, 4e-2, false);
}

FUSOR_TEST_CASE("max_pool2d: forward and backward against loops, disjoint and overlapping windows") {
  auto check = [&]<std::size_t Window, std::size_t Stride, std::size_t C, std::size_t H, std::size_t W, class P>(
                   index_t batch, double tolerance) {
    using net_t = nn::network<nn::sequential<nn::features<C, H, W>, nn::max_pool2d<Window, Stride>>, P, space>;
    executor ex{};
    net_t net(batch, {.seed = 1});
    const image_shape in{batch, index_t(C), index_t(H), index_t(W)};
    values x, dy_values;
    const auto hx = random_values<P>(in.size(), 21, x);
    auto x_space = to_space(hx);
    auto dx_space = to_space(hx);
    image_shape out{};
    std::vector<index_t> where;
    const auto want = pool_reference(x, in, index_t(Window), index_t(Stride), out, where);
    const std::string what = "max_pool2d<" + std::to_string(Window) + ", " + std::to_string(Stride) + ">";
    check_close(as_doubles(net.forward(typename net_t::input_view(x_space.data(), batch), ex)), want, 0, what);
    const auto hdy = random_values<P>(out.size(), 22, dy_values);
    copy(net.output_gradient(), host_view_like(net.output_gradient(), hdy.data()));
    poison(dx_space);
    net.backward(ex, typename net_t::input_view(dx_space.data(), batch));
    check_close(as_doubles(dx_space), pool_backward_reference(dy_values, where, in.size()), tolerance, what + " dx");
  };
  check.template operator()<2, 2, 3, 6, 7, fp32>(4, 0);
  check.template operator()<3, 2, 2, 7, 8, fp32>(3, 1e-6);  // overlapping: sums of up to 4 gradients
  check.template operator()<2, 1, 2, 5, 5, fp32>(2, 1e-6);
  check.template operator()<2, 2, 3, 6, 7, bf16>(2, 0);     // a copy of the maxima: exact in any precision
  check.template operator()<3, 2, 2, 7, 8, bf16>(2, 2e-2);
}

namespace {
// conv 1->8 3x3 pad 1, relu, 2x2 pool, flatten, linear 1568 -> 10: the example, smaller.
void check_small_cnn(bool separate_bias_gradients) {
  INFO("bias gradients summed apart: ", separate_bias_gradients);
  const detail::scoped_separate_bias_gradient hook(separate_bias_gradients);
  using cnn = nn::sequential<nn::features<1, 28, 28>, nn::conv2d<1, 8, 3, 1, 1>, nn::relu, nn::max_pool2d<2>,
                             nn::flatten, nn::linear<8 * 14 * 14, 10>>;
  static_assert(std::is_same_v<cnn::output_features, nn::features<10>>);
  executor ex{};
  const index_t batch = 6, classes = 10, hidden = 8 * 14 * 14;
  nn::network<cnn, fp32, space> net(8, {.seed = 17});
  const image_shape in{batch, 1, 28, 28};
  values x, dy_values;
  const auto hx = random_values<fp32>(in.size(), 31, x);
  const auto x_space = to_space(hx);
  const auto y = as_doubles(net.forward(view<float, dextents<index_t, 4>, row_major, space>(x_space.data(), batch, 1, 28, 28), ex));
  const auto p = parameter_values(net, false);
  REQUIRE(p.size() == 4);

  image_shape conv_out{}, pool_out{};
  auto a = conv_reference(x, in, p[0], p[1], 8, 3, 1, 1, conv_out);
  for (auto& v : a) v = std::fmax(v, 0.0);
  std::vector<index_t> where;
  const auto pooled = pool_reference(a, conv_out, 2, 2, pool_out, where);
  values logits(std::size_t(batch * classes));
  for (index_t n = 0; n < batch; ++n)
    for (index_t o = 0; o < classes; ++o) {
      double s = p[3][std::size_t(o)];
      for (index_t k = 0; k < hidden; ++k) s += p[2][std::size_t(o * hidden + k)] * pooled[std::size_t(n * hidden + k)];
      logits[std::size_t(n * classes + o)] = s;
    }
  check_close(y, logits, 1e-4, "CNN logits");

  const auto hdy = random_values<fp32>(batch * classes, 32, dy_values);
  copy(net.output_gradient(), host_view_like(net.output_gradient(), hdy.data()));
  net.backward(ex);
  const auto g = parameter_values(net, true);
  // Backward by hand: linear, pool (to the maxima), relu (where the conv output was positive), conv.
  values dlinear_w(std::size_t(classes * hidden), 0.0), dlinear_b(std::size_t(classes), 0.0), dpooled(pooled.size(), 0.0);
  for (index_t n = 0; n < batch; ++n)
    for (index_t o = 0; o < classes; ++o) {
      const double d = dy_values[std::size_t(n * classes + o)];
      dlinear_b[std::size_t(o)] += d;
      for (index_t k = 0; k < hidden; ++k) {
        dlinear_w[std::size_t(o * hidden + k)] += d * pooled[std::size_t(n * hidden + k)];
        dpooled[std::size_t(n * hidden + k)] += d * p[2][std::size_t(o * hidden + k)];
      }
    }
  auto dconv = pool_backward_reference(dpooled, where, conv_out.size());
  for (std::size_t i = 0; i < dconv.size(); ++i) dconv[i] = a[i] > 0 ? dconv[i] : 0.0;
  values dw, db, dx;
  conv_backward_reference(x, in, p[0], dconv, conv_out, 3, 1, 1, dw, db, dx);
  check_close(g[0], dw, 1e-4, "CNN conv dweight");
  check_close(g[1], db, 1e-4, "CNN conv dbias");
  check_close(g[2], dlinear_w, 1e-4, "CNN linear dweight");
  check_close(g[3], dlinear_b, 1e-4, "CNN linear dbias");
}
}  // namespace

FUSOR_TEST_CASE("a small CNN: forward and backward, every layer against loops") { check_small_cnn(false); }

FUSOR_TEST_CASE("conv2d and linear with their bias gradients summed apart (cuBLASLt's fallback) give the same results") {
  check_small_cnn(true);
  const detail::scoped_separate_bias_gradient hook;
  check_conv<fp32, 3, 4, 3, 2, 1, 7, 9>(5, 1e-5, true);
  check_conv<fp32, 1, 8, 3, 1, 1, 28, 28>(3, 1e-4, true);  // dbias sums 2352 rows: partial sums per chunk
  check_conv<bf16, 3, 4, 3, 2, 1, 7, 9>(5, 4e-2, true);
}
