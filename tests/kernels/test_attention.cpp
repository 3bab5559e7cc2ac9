// causal_attention and its backward against a naive fp64 reference (the full
// T x T softmax, formed here), under every executor: y, lse and dqkv in fp32,
// bf16 and fp16 at head_dim 16, 24, 32 and 64; T = 1, T inside one block and
// across blocks (not a multiple of the block size); several heads,
// grouped-query heads (H = 4 with G = 2 and G = 1); the causal mask (a future
// key changes nothing before it); a strided lse; a bitwise-repeatable
// backward; rotary embeddings against their formula and their inverse; shape
// errors naming both shapes; nn::causal_attention in a network (grouped-query,
// rotary) against the same reference, fp32 and bf16.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fusor/kernels/attention.hpp>
#include <fusor/nn/attention.hpp>
#include <fusor/nn/network.hpp>

#include "kernels/attention_reference.hpp"

using namespace rowwise_test;
using namespace attention_test;

namespace {

template <class P>
void check_case(const attention_case& c, std::uint32_t seed) {
  const std::string what = std::string(precision_name<P>()) + " " + c.name();
  host_tensor<P, cube_extents> hqkv(c.batch, c.time, c.width()), hdy(c.batch, c.time, c.heads * c.head_dim);
  fill_random(hqkv, seed, -1.5, 1.5);
  fill_random(hdy, seed + 1, -1.0, 1.0);
  const auto qkv = to_space(hqkv);
  const auto dy = to_space(hdy);
  space_tensor<P, cube_extents> y(c.batch, c.time, c.heads * c.head_dim), dqkv(c.batch, c.time, c.width());
  space_tensor<float, cube_extents> lse(c.batch, c.heads, c.time);
  poison(y), poison(lse), poison(dqkv);
  const attention_heads heads{c.heads, c.kv_heads};
  executor ex{};
  causal_attention(y, lse, qkv, heads, ex);
  causal_attention_backward(dqkv, dy, qkv, y, lse, heads, ex);
  finish(ex);

  const auto want = reference(as_doubles(hqkv), as_doubles(hdy), c);
  const double tol = attention_tolerance<P>();
  compare(what + ", y", as_doubles(y), want.y, tol, c.heads * c.head_dim);
  compare(what + ", lse", as_doubles(lse), want.lse, std::is_same_v<P, float> ? 2e-6 : 2e-3, c.time);
  compare(what + ", dqkv", as_doubles(dqkv), want.dqkv, 2 * tol, c.width());
}

std::vector<attention_case> cases() {
  return {
      {2, 1, 2, 2, 16},    // T = 1: one key per query
      {2, 37, 3, 3, 16},   // inside one block
      {1, 64, 2, 2, 32},   // exactly one block
      {2, 70, 2, 2, 64},   // across blocks, T not a multiple of the block
      {1, 130, 4, 2, 32},  // grouped-query: two query heads per kv head, three blocks
      {2, 97, 4, 1, 64},   // multi-query: one kv head for four query heads
      {1, 45, 3, 1, 24},   // a head_dim that is not a multiple of 16
  };
}

}  // namespace

FUSOR_TEST_CASE("causal_attention: forward and backward against the fp64 softmax, fp32") {
  std::uint32_t seed = 10;
  for (const auto& c : cases()) check_case<float>(c, seed += 2);
}

FUSOR_TEST_CASE("causal_attention: forward and backward against the fp64 softmax, bf16 and fp16") {
  std::uint32_t seed = 40;
  for (const auto& c : cases()) check_case<bfloat16>(c, seed += 2);
  check_case<float16>({2, 70, 4, 2, 32}, 90);
  check_case<float16>({1, 20, 2, 2, 64}, 92);
  check_case<bfloat16>({1, 150, 2, 1, 128}, 94);  // the largest head (the GPU's tensor-core kernels at 128)
  check_case<bfloat16>({1, 40, 2, 2, 12}, 96);    // heads of 12 columns: the GPU's kernels with shared accumulators
}

FUSOR_TEST_CASE("causal_attention: a later key or value changes no earlier output") {
  const attention_case c{1, 90, 2, 1, 32};
  host_tensor<float, cube_extents> hqkv(c.batch, c.time, c.width());
  fill_random(hqkv, 5, -1.5, 1.5);
  const auto qkv = to_space(hqkv);
  space_tensor<float, cube_extents> y(c.batch, c.time, c.heads * c.head_dim), lse(c.batch, c.heads, c.time);
  executor ex{};
  causal_attention(y, lse, qkv, {c.heads, c.kv_heads}, ex);
  const auto before = as_doubles(y);
  // Key and value of position 71 (in the second block) scrambled.
  const index_t changed = 71;
  for (index_t x = c.heads * c.head_dim; x < c.width(); ++x) hqkv(0, changed, x) = hqkv(0, changed, x) * -3.0f + 1.0f;
  const auto qkv2 = to_space(hqkv);
  causal_attention(y, lse, qkv2, {c.heads, c.kv_heads}, ex);
  finish(ex);
  const auto after = as_doubles(y);
  const index_t row = c.heads * c.head_dim;
  for (index_t t = 0; t < c.time; ++t) {
    bool same = true;
    for (index_t x = 0; x < row; ++x)
      same = same && before[std::size_t(t * row + x)] == after[std::size_t(t * row + x)];
    INFO("position ", t);
    CHECK(same == (t < changed));
  }
}

FUSOR_TEST_CASE("causal_attention_backward: the same bits every run; lse through a strided view") {
  const attention_case c{2, 100, 4, 2, 32};
  host_tensor<float, cube_extents> hqkv(c.batch, c.time, c.width()), hdy(c.batch, c.time, c.heads * c.head_dim);
  fill_random(hqkv, 7, -1.5, 1.5);
  fill_random(hdy, 8, -1.0, 1.0);
  const auto qkv = to_space(hqkv);
  const auto dy = to_space(hdy);
  space_tensor<float, cube_extents> y(c.batch, c.time, c.heads * c.head_dim), first(c.batch, c.time, c.width()),
      second(c.batch, c.time, c.width());
  // lse stored [batch, time, heads] and seen as [batch, heads, time].
  space_tensor<float, cube_extents> lse_storage(c.batch, c.time, c.heads);
  const auto lse = permute<0, 2, 1>(lse_storage.view());
  executor ex{};
  causal_attention(y, lse, qkv, {c.heads, c.kv_heads}, ex);
  causal_attention_backward(first, dy, qkv, y, lse, {c.heads, c.kv_heads}, ex);
#if !defined(FUSOR_TEST_CUDA)
  causal_attention_backward(second, dy, qkv, y, lse, {c.heads, c.kv_heads}, host_executor{1});
#else
  causal_attention_backward(second, dy, qkv, y, lse, {c.heads, c.kv_heads}, ex);
#endif
  finish(ex);
  const auto a = as_doubles(first), b = as_doubles(second);
  CHECK(a == b);
  const auto want = reference(as_doubles(hqkv), as_doubles(hdy), c);
  compare("strided lse, y", as_doubles(y), want.y, 2e-5, c.heads * c.head_dim);
  compare("strided lse, dqkv", a, want.dqkv, 4e-5, c.width());
}

FUSOR_TEST_CASE("rotary_embedding: pairs rotated by t * base^(-2i/D), values copied, inverse undoes it") {
  const attention_case c{2, 11, 2, 1, 8};
  host_tensor<float, cube_extents> hqkv(c.batch, c.time, c.width());
  fill_random(hqkv, 9, -1.5, 1.5);
  const auto qkv = to_space(hqkv);
  space_tensor<float, cube_extents> rotated(c.batch, c.time, c.width());
  poison(rotated);
  executor ex{};
  rotary_embedding(rotated, qkv, {c.heads, c.kv_heads}, {.base = 500}, ex);
  finish(ex);
  const auto got = as_doubles(rotated), x = as_doubles(hqkv);
  checker check("rotary_embedding");
  for (index_t b = 0; b < c.batch; ++b)
    for (index_t t = 0; t < c.time; ++t)
      for (index_t col = 0; col < c.width(); col += 2) {
        const std::size_t at = std::size_t((b * c.time + t) * c.width() + col);
        const index_t head = col / c.head_dim, i = (col % c.head_dim) / 2;
        double want0 = x[at], want1 = x[at + 1];
        if (head < c.heads + c.kv_heads) {
          const double angle = double(t) * std::pow(500.0, -2.0 * double(i) / double(c.head_dim));
          want0 = x[at] * std::cos(angle) - x[at + 1] * std::sin(angle);
          want1 = x[at] * std::sin(angle) + x[at + 1] * std::cos(angle);
        }
        check(got[at], want0, 1.0, 2e-6, 0, b * c.time + t, col);
        check(got[at + 1], want1, 1.0, 2e-6, 0, b * c.time + t, col + 1);
      }
  check.finish();
  // The inverse, in place, gives the input back.
  rotary_embedding(rotated, rotated, {c.heads, c.kv_heads}, {.base = 500, .inverse = true}, ex);
  finish(ex);
  compare("rotary_embedding inverse", as_doubles(rotated), x, 2e-6, c.width());
}

FUSOR_TEST_CASE("causal_attention: shape errors name both shapes") {
  space_tensor<float, cube_extents> qkv(2, 5, 36), y(2, 5, 12), lse(2, 2, 5), bad_y(2, 4, 12), bad_lse(2, 5, 2);
  executor ex{};
  expect_error<shape_error>([&] { causal_attention(bad_y, lse, qkv, {2}, ex); }, {"[2, 5, 36]", "[2, 4, 12]"});
  expect_error<shape_error>(
      [&] {
        causal_attention(y, lse, qkv, {2, 1}, ex);
      },
      {"[2, 5, 36]", "[2, 5, 12]", "[2, 5, 24]"});
  expect_error<shape_error>([&] { causal_attention(y, bad_lse, qkv, {2}, ex); },
                            {"[2, 5, 2]", "[2, 5, 12]", "[2, 2, 5]"});
  expect_error<shape_error>([&] { causal_attention(y, lse, qkv, {3, 2}, ex); }, {"3 query heads", "2 key/value heads"});
  space_tensor<float, cube_extents> dqkv(2, 5, 30);
  expect_error<shape_error>([&] { causal_attention_backward(dqkv, y, qkv, y, lse, {2}, ex); },
                            {"[2, 5, 30]", "[2, 5, 36]"});
  expect_error<shape_error>([&] { rotary_embedding(qkv, qkv, {4}, {}, ex); }, {"[2, 5, 36]", "even"});
}

namespace {
// LLaMA's rotation of the query and key heads of every row of qkv (inverse: by -angle).
void rotate(std::vector<double>& qkv, const attention_case& c, double base, bool inverse) {
  for (index_t row = 0; row < c.batch * c.time; ++row)
    for (index_t col = 0; col < (c.heads + c.kv_heads) * c.head_dim; col += 2) {
      const index_t t = row % c.time, i = (col % c.head_dim) / 2;
      const double angle =
          (inverse ? -1.0 : 1.0) * double(float(t) * float(std::pow(base, -2.0 * double(i) / double(c.head_dim))));
      double& a = qkv[std::size_t(row * c.width() + col)];
      double& b = qkv[std::size_t(row * c.width() + col + 1)];
      const double x = a, y = b;
      a = x * std::cos(angle) - y * std::sin(angle);
      b = x * std::sin(angle) + y * std::cos(angle);
    }
}

template <class P, class Layer, std::size_t T>
void check_layer(const attention_case& c, double base, std::uint32_t seed) {
  using net_t = nn::network<nn::sequential<nn::features<T, Layer::input_width>, Layer>, P, space>;
  executor ex{};
  net_t net(c.batch, {.seed = seed});
  host_tensor<P, cube_extents> hx(c.batch, c.time, c.width()), hdy(c.batch, c.time, c.heads * c.head_dim);
  fill_random(hx, seed + 1, -1.5, 1.5);
  fill_random(hdy, seed + 2, -1.0, 1.0);
  const auto x = to_space(hx);
  const auto y = as_doubles(net.forward(typename net_t::input_view(x.data(), c.batch), ex));
  copy(net.output_gradient(), hdy);
  space_tensor<P, cube_extents> dx(c.batch, c.time, c.width());
  poison(dx);
  net.backward(ex, typename net_t::input_view(dx.data(), c.batch));
  finish(ex);

  auto qkv = as_doubles(hx);
  if (base > 0) rotate(qkv, c, base, false);
  auto want = reference(qkv, as_doubles(hdy), c);
  if (base > 0) rotate(want.dqkv, c, base, true);
  const std::string what = std::string("layer ") + precision_name<storage_t<P>>() + " " + c.name();
  compare(what + ", y", y, want.y, attention_tolerance<storage_t<P>>(), c.heads * c.head_dim);
  compare(what + ", dx", as_doubles(dx), want.dqkv, 2 * attention_tolerance<storage_t<P>>(), c.width());
}
}  // namespace

FUSOR_TEST_CASE("nn::causal_attention in a network: forward and backward against the fp64 reference") {
  check_layer<fp32, nn::causal_attention<3, 16>, 70>({2, 70, 3, 3, 16}, 0, 201);
  check_layer<fp32, nn::causal_attention<4, 8, nn::kv_heads<2>, nn::rotary<>>, 33>({3, 33, 4, 2, 8}, 10000, 202);
  check_layer<bf16, nn::causal_attention<4, 32, nn::kv_heads<1>, nn::rotary<500>>, 80>({2, 80, 4, 1, 32}, 500, 203);
}
