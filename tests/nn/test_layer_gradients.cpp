// conv2d, max_pool2d, flatten, layernorm, dropout and embedding: every
// parameter's and every input's gradient against central differences, fp64 on
// the host, at odd sizes (strides and padding that do not divide evenly), and
// their shape inference at compile time.
#include "nn/nn_test.hpp"

#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/dropout.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/max_pool2d.hpp>

using namespace fusor;

// Shape inference: each layer's output features, checked by the compiler.
static_assert(std::is_same_v<nn::conv2d<3, 8, 3, 2, 1>::output<nn::features<3, 7, 9>>, nn::features<8, 4, 5>>);
static_assert(std::is_same_v<nn::conv2d<1, 32, 3, 1, 1>::output<nn::features<1, 28, 28>>, nn::features<32, 28, 28>>);
static_assert(std::is_same_v<nn::conv2d<2, 4, 5>::output<nn::features<2, 5, 9>>, nn::features<4, 1, 5>>);
static_assert(nn::conv2d<3, 8, 3>::accepts<nn::features<3, 5, 5>> && !nn::conv2d<3, 8, 3>::accepts<nn::features<2, 5, 5>> &&
              !nn::conv2d<3, 8, 3>::accepts<nn::features<75>>);
static_assert(std::is_same_v<nn::max_pool2d<2>::output<nn::features<8, 28, 28>>, nn::features<8, 14, 14>>);
static_assert(std::is_same_v<nn::max_pool2d<2>::output<nn::features<3, 7, 9>>, nn::features<3, 3, 4>>);
static_assert(std::is_same_v<nn::max_pool2d<3, 2>::output<nn::features<2, 7, 8>>, nn::features<2, 3, 3>>);
static_assert(std::is_same_v<nn::flatten::output<nn::features<8, 14, 14>>, nn::features<8 * 14 * 14>>);
static_assert(std::is_same_v<nn::layernorm<5>::output<nn::features<3, 5>>, nn::features<3, 5>>);
static_assert(nn::layernorm<5>::accepts<nn::features<3, 5>> && !nn::layernorm<5>::accepts<nn::features<5, 3>>);
static_assert(std::is_same_v<nn::embedding<100, 16>::output<nn::features<12>>, nn::features<12, 16>>);
static_assert(!nn::embedding<100, 16>::accepts<nn::features<3, 4>>);
static_assert(std::is_same_v<nn::dropout<10>::output<nn::features<4, 5>>, nn::features<4, 5>>);
static_assert(nn::dropout<1, 2>::rate == 0.5);
using small_cnn = nn::sequential<nn::features<1, 28, 28>, nn::conv2d<1, 8, 3, 1, 1>, nn::relu, nn::max_pool2d<2>,
                                 nn::flatten, nn::linear<8 * 14 * 14, 10>>;
static_assert(std::is_same_v<small_cnn::output_features, nn::features<10>>);

TEST_CASE("conv2d: gradients against central differences (strides, padding, odd sizes)") {
  nn_test::check_gradients<nn::sequential<nn::features<3, 7, 9>, nn::conv2d<3, 4, 3, 2, 1>>>(2, 21);
  nn_test::check_gradients<nn::sequential<nn::features<2, 5, 4>, nn::conv2d<2, 3, 2>>>(3, 22);
  nn_test::check_gradients<nn::sequential<nn::features<2, 6, 5>, nn::conv2d<2, 3, 3, 3, 2>>>(2, 23);
  nn_test::check_gradients<nn::sequential<nn::features<3, 4, 4>, nn::conv2d<3, 2, 1>>>(2, 24);  // 1 x 1
  // Two convolutions: the second's dx flows into the first's parameters.
  nn_test::check_gradients<nn::sequential<nn::features<2, 6, 7>, nn::conv2d<2, 3, 3, 1, 1>, nn::tanh_activation,
                                          nn::conv2d<3, 2, 3, 2, 0>>>(2, 25);
}

TEST_CASE("max_pool2d: gradients against central differences, disjoint and overlapping windows") {
  nn_test::check_gradients<nn::sequential<nn::features<3, 6, 7>, nn::max_pool2d<2>>>(2, 31);
  nn_test::check_gradients<nn::sequential<nn::features<2, 7, 8>, nn::max_pool2d<3, 2>>>(2, 32);
  nn_test::check_gradients<nn::sequential<nn::features<2, 5, 5>, nn::max_pool2d<2, 1>>>(2, 33);
}

TEST_CASE("flatten: gradients through a CNN's head") {
  nn_test::check_gradients<nn::sequential<nn::features<2, 3, 4>, nn::flatten, nn::linear<24, 5>>>(3, 41);
  nn_test::check_gradients<nn::sequential<nn::features<1, 8, 8>, nn::conv2d<1, 3, 3, 1, 1>, nn::relu,
                                          nn::max_pool2d<2>, nn::flatten, nn::linear<3 * 4 * 4, 4>>>(2, 42);
}

TEST_CASE("layernorm: gradients against central differences, one row and several rows per sample") {
  nn_test::check_gradients<nn::sequential<nn::features<6>, nn::layernorm<6>>>(3, 51);
  // weight and bias away from 1 and 0 first (a linear before, and one after).
  nn_test::check_gradients<nn::sequential<nn::features<7>, nn::linear<7, 6>, nn::layernorm<6>, nn::linear<6, 3>>>(4, 52);
  nn_test::check_gradients<nn::sequential<nn::features<3, 5>, nn::layernorm<5>>>(2, 53);
}

TEST_CASE("dropout: gradients against central differences at a fixed step") {
  // The same step in every forward: the same mask, so finite differences apply.
  const nn::run_mode step_seven{true, 7};
  nn_test::check_gradients<nn::sequential<nn::features<40>, nn::dropout<30>>>(3, 61, 1e-6, 40, step_seven);
  nn_test::check_gradients<nn::sequential<nn::features<9>, nn::linear<9, 20>, nn::dropout<1, 2>, nn::linear<20, 3>>>(
      4, 62, 1e-6, 40, step_seven);
  nn_test::check_gradients<nn::sequential<nn::features<12>, nn::dropout<30>>>(2, 63, 1e-6, 40, nn::evaluation);
}

TEST_CASE("embedding: table gradients against central differences (int32 ids, no input gradient)") {
  using net_t = nn::network<nn::sequential<nn::features<6>, nn::embedding<11, 4>, nn::layernorm<4>, nn::flatten,
                                           nn::linear<24, 3>>,
                            double, host_space>;
  static_assert(std::is_same_v<net_t::input_precision, std::int32_t>);
  const index_t batch = 3;
  net_t net(batch, {.seed = 71});
  tensor<std::int32_t, dextents<index_t, 2>> ids(batch, 6);
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t((i * 7 + 3) % 11);  // token 5 repeats
  ids.data()[4] = ids.data()[11] = 5;
  auto y = net.forward(ids, host_executor{});
  std::vector<double> r(std::size_t(y.size()));
  std::mt19937 rng(72);
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& v : r) v = u(rng);
  for (index_t i = 0; i < y.size(); ++i) net.output_gradient().data()[i] = r[std::size_t(i)];
  net.backward(host_executor{});
  auto loss = [&] { return nn_test::weighted_sum(net.forward(ids, host_executor{}), r); };
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto gradients) {
    for (index_t i = 0; i < slot.size; ++i) {
      const double keep = values.data()[i], h = 1e-6;
      values.data()[i] = keep + h;
      const double up = loss();
      values.data()[i] = keep - h;
      const double down = loss();
      values.data()[i] = keep;
      INFO(slot.name << "[" << i << "]");
      CHECK(std::fabs(gradients.data()[i] - (up - down) / (2 * h)) <= 1e-6 * std::fmax(1.0, std::fabs(gradients.data()[i])));
    }
  });
}
