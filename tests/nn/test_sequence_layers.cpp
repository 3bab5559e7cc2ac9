// nn::layernorm, nn::dropout, nn::embedding and nn::flatten under every
// executor: forward and backward against double loops (fp32 and bf16), the
// dropout mask's reproducibility and statistics, and the embedding's int32
// input and its errors.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/nn_test.hpp"
#include "support/fusor_test.hpp"

#include <fusor/nn/dropout.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/network.hpp>

using namespace fusor;
using namespace fusor_test;

namespace {
using values = std::vector<double>;
using nn_test::parameter_values;

// A host tensor shaped as view v, random in [-1.5, 1.5), and what it stores as doubles.
template <class V>
auto random_like(const V& v, std::uint32_t seed, values& stored) {
  host_tensor<typename V::precision, typename V::extents_type> h(v.extents());
  fill_random(h, seed, -1.5, 1.5);
  stored = as_doubles(h);
  return h;
}

template <class P>
void check_layernorm(double tolerance) {
  constexpr index_t rows_per_sample = 3, n = 20, batch = 5;
  using net_t = nn::network<nn::sequential<nn::features<3, 20>, nn::layernorm<20>>, P, space>;
  executor ex{};
  net_t net(batch, {.seed = 2});
  // weight and bias away from their initial 1 and 0.
  std::uint32_t seed = 40;
  net.for_each_parameter([&](const nn::parameter_slot&, auto v, auto) {
    values unused;
    copy(v, random_like(v, seed++, unused));
  });
  const auto p = parameter_values(net, false);
  values x, dy;
  typename net_t::input_view shape_of_x(nullptr, batch);
  auto x_space = to_space(random_like(shape_of_x, 41, x));
  const auto y = as_doubles(net.forward(x_space, ex));
  auto dy_host = random_like(net.output_gradient(), 42, dy);
  copy(net.output_gradient(), dy_host.view());
  values unused;
  auto dx_space = to_space(random_like(shape_of_x, 43, unused));
  poison(dx_space);
  net.backward(ex, dx_space.view());
  const auto g = parameter_values(net, true);

  values want(x.size()), dx(x.size()), dw(std::size_t(n), 0.0), db(std::size_t(n), 0.0);
  for (index_t r = 0; r < batch * rows_per_sample; ++r) {
    const double* in = x.data() + r * n;
    const double* d = dy.data() + r * n;
    double mean = 0, var = 0;
    for (index_t j = 0; j < n; ++j) mean += in[j] / n;
    for (index_t j = 0; j < n; ++j) var += (in[j] - mean) * (in[j] - mean) / n;
    const double rstd = 1 / std::sqrt(var + 1e-5);
    double mean_g = 0, mean_gx = 0;
    for (index_t j = 0; j < n; ++j) {
      const double xhat = (in[j] - mean) * rstd, gj = d[j] * p[0][std::size_t(j)];
      want[std::size_t(r * n + j)] = xhat * p[0][std::size_t(j)] + p[1][std::size_t(j)];
      dw[std::size_t(j)] += d[j] * xhat;
      db[std::size_t(j)] += d[j];
      mean_g += gj / n;
      mean_gx += gj * xhat / n;
    }
    for (index_t j = 0; j < n; ++j) {
      const double xhat = (in[j] - mean) * rstd;
      dx[std::size_t(r * n + j)] = rstd * (d[j] * p[0][std::size_t(j)] - mean_g - xhat * mean_gx);
    }
  }
  check_close(y, want, tolerance, "layernorm forward");
  check_close(as_doubles(dx_space), dx, tolerance, "layernorm dx");
  check_close(g[0], dw, tolerance, "layernorm dweight");
  check_close(g[1], db, tolerance, "layernorm dbias");
}
}  // namespace

FUSOR_TEST_CASE("layernorm: forward and backward against a double loop, fp32 and bf16") {
  check_layernorm<fp32>(2e-5);
  check_layernorm<bf16>(5e-2);
}

FUSOR_TEST_CASE("dropout: reproducible per (seed, step), keeps about 1 - p, backward uses the same mask") {
  using net_t = nn::network<nn::sequential<nn::features<1000>, nn::dropout<30>>, fp32, space>;
  executor ex{};
  const index_t batch = 64;
  net_t net(batch, {.seed = 7}), same_seed(batch, {.seed = 7}), other_seed(batch, {.seed = 8});
  values x;
  auto x_space = to_space(random_like(typename net_t::input_view(nullptr, batch), 51, x));
  const auto step5 = as_doubles(net.forward(x_space, ex, nn::run_mode{true, 5}));
  CHECK(as_doubles(net.forward(x_space, ex, nn::run_mode{true, 5})) == step5);
  CHECK(as_doubles(same_seed.forward(x_space, ex, nn::run_mode{true, 5})) == step5);
  CHECK(as_doubles(other_seed.forward(x_space, ex, nn::run_mode{true, 5})) != step5);
  const auto step6 = as_doubles(net.forward(x_space, ex, nn::run_mode{true, 6}));
  CHECK(step6 != step5);

  // The step may come from a counter in the network's memory (what a CUDA graph replays).
  tensor<std::int64_t, extents<index_t>, row_major, space> counter(extents<index_t>{});
  const std::int64_t five = 5;
  copy(counter.view(), view<std::int64_t, extents<index_t>>(const_cast<std::int64_t*>(&five)));
  CHECK(as_doubles(net.forward(x_space, ex, nn::run_mode{true, 999, counter.data()})) == step5);

  // Kept elements are x / 0.7, the others 0; the kept fraction is 0.7 within 5 standard deviations.
  index_t kept = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (step5[i] == 0) continue;
    ++kept;
    CHECK(close(step5[i], float(x[i]) * float(1 / 0.7), 1e-6));
  }
  const double fraction = double(kept) / double(x.size()), sigma = std::sqrt(0.7 * 0.3 / double(x.size()));
  INFO("kept fraction " << fraction);
  CHECK(std::fabs(fraction - 0.7) < 5 * sigma);
  // The masks of steps 5 and 6 agree about as often as independent draws would.
  index_t both = 0;
  for (std::size_t i = 0; i < x.size(); ++i) both += (step5[i] != 0) && (step6[i] != 0);
  CHECK(std::fabs(double(both) / double(x.size()) - 0.49) < 5 * std::sqrt(0.49 * 0.51 / double(x.size())));

  // Backward after the step-5 forward: dx = dy / 0.7 where y was kept, else 0.
  (void)net.forward(x_space, ex, nn::run_mode{true, 5});
  values dy;
  copy(net.output_gradient(), random_like(net.output_gradient(), 52, dy).view());
  values unused;
  auto dx_space = to_space(random_like(typename net_t::input_view(nullptr, batch), 53, unused));
  poison(dx_space);
  net.backward(ex, dx_space.view());
  const auto dx = as_doubles(dx_space);
  for (std::size_t i = 0; i < dx.size(); ++i) {
    INFO("element " << i);
    CHECK(close(dx[i], step5[i] == 0 ? 0.0 : float(dy[i]) * float(1 / 0.7), 1e-6));
  }

  // Evaluation: the identity, forward and backward.
  values x2;
  auto x2_space = to_space(random_like(typename net_t::input_view(nullptr, batch), 54, x2));
  CHECK(as_doubles(net.forward(x2_space, ex, nn::evaluation)) == x2);
  poison(dx_space);
  net.backward(ex, dx_space.view());
  CHECK(as_doubles(dx_space) == dy);
}

FUSOR_TEST_CASE("embedding: int32 ids in, table rows out; the table's gradient sums the rows of each id") {
  auto check = [&]<class P>(double tolerance) {
    constexpr index_t vocabulary = 13, dimension = 8, sequence = 7, batch = 5;
    using net_t = nn::network<nn::sequential<nn::features<7>, nn::embedding<13, 8>>, P, space>;
    static_assert(std::is_same_v<typename net_t::input_precision, std::int32_t>);
    executor ex{};
    net_t net(batch, {.seed = 4});
    host_tensor<std::int32_t, extents<index_t, dynamic, 7>> ids(batch);
    for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t((i * i + 3 * i) % 11);  // repeats, 11, 12 unused
    auto ids_space = to_space(ids);
    const auto y = as_doubles(net.forward(ids_space, ex));
    const auto table = parameter_values(net, false)[0];
    values want(y.size());
    for (index_t t = 0; t < batch * sequence; ++t)
      for (index_t d = 0; d < dimension; ++d)
        want[std::size_t(t * dimension + d)] = table[std::size_t(ids.data()[t] * dimension + d)];
    CHECK(y == want);

    // The same ids as floats: converted once on the way in.
    host_tensor<float, extents<index_t, dynamic, 7>> float_ids(batch);
    for (index_t i = 0; i < ids.size(); ++i) float_ids.data()[i] = float(ids.data()[i]);
    auto float_ids_space = to_space(float_ids);
    CHECK(as_doubles(net.forward(float_ids_space, ex)) == want);

    values dy;
    copy(net.output_gradient(), random_like(net.output_gradient(), 61, dy).view());
    net.backward(ex);
    values dtable(std::size_t(vocabulary * dimension), 0.0);
    for (index_t t = 0; t < batch * sequence; ++t)
      for (index_t d = 0; d < dimension; ++d)
        dtable[std::size_t(ids.data()[t] * dimension + d)] += dy[std::size_t(t * dimension + d)];
    check_close(parameter_values(net, true)[0], dtable, tolerance, "embedding dweight");

    // Token ids have no gradient.
    tensor<std::int32_t, extents<index_t, dynamic, 7>, row_major, space> dx(batch);
    expect_error<error>([&] { net.backward(ex, dx.view()); }, {"embedding", "token ids have no gradient"});
  };
  check.template operator()<fp32>(1e-6);
  check.template operator()<bf16>(1.6e-2);
}

#if !defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("embedding: an id outside the vocabulary is an error on the host, naming it and where it is") {
  nn::network<nn::sequential<nn::features<4>, nn::embedding<10, 3>>, fp32, host_space> net(2);
  tensor<std::int32_t, extents<index_t, dynamic, 4>> ids(2);
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t(i);
  ids(1, 2) = 10;
  expect_error<error>([&] { net.forward(ids, host_executor{}); }, {"token id 10", "sample 1, position 2", "[0, 10)"});
  ids(1, 2) = -1;
  expect_error<error>([&] { net.forward(ids, host_executor{}); }, {"token id -1"});
}
#endif

FUSOR_TEST_CASE("flatten: forward and backward move every element as it is") {
  using net_t = nn::network<nn::sequential<nn::features<2, 3, 5>, nn::flatten>, fp32, space>;
  static_assert(std::is_same_v<net_t::output_features, nn::features<30>>);
  executor ex{};
  net_t net(4);
  values x, dy;
  auto x_space = to_space(random_like(typename net_t::input_view(nullptr, 3), 71, x));
  CHECK(as_doubles(net.forward(x_space, ex)) == x);
  copy(net.output_gradient(), random_like(net.output_gradient(), 72, dy).view());
  values unused;
  auto dx_space = to_space(random_like(typename net_t::input_view(nullptr, 3), 73, unused));
  poison(dx_space);
  net.backward(ex, dx_space.view());
  CHECK(as_doubles(dx_space) == dy);
}
