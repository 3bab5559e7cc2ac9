// Composite layers (nn::chain, nn::residual, nn::branches, nn::recomputed) and
// the hand-written SwiGLU layer: every parameter's and every input's gradient
// against central differences, fp64 on the host, through networks that hold
// them at several depths of nesting; their shape inference at compile time.
#include "nn/nn_test.hpp"

#include <fusor/nn/branches.hpp>
#include <fusor/nn/chain.hpp>
#include <fusor/nn/dropout.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/recompute.hpp>
#include <fusor/nn/residual.hpp>

#include "nn/swiglu_layer.hpp"

using namespace fusor;

namespace {
using mlp_block = nn::residual<nn::linear<6, 10, nn::tanh_activation>, nn::linear<10, 6>>;
using token_block = nn::residual<nn::layernorm<8>, example::swiglu<8, 12>>;
}  // namespace

// Shape inference through composites, checked by the compiler.
static_assert(std::is_same_v<nn::chain<nn::linear<5, 7>, nn::relu, nn::linear<7, 3>>::output<nn::features<5>>, nn::features<3>>);
static_assert(nn::chain<nn::linear<5, 7>>::accepts<nn::features<5>> && !nn::chain<nn::linear<5, 7>>::accepts<nn::features<6>>);
static_assert(std::is_same_v<mlp_block::output<nn::features<6>>, nn::features<6>>);
static_assert(std::is_same_v<token_block::output<nn::features<4, 8>>, nn::features<4, 8>>);
static_assert(std::is_same_v<nn::branches<nn::join_concat, nn::layernorm<8>, nn::elementwise<nn::functions::tanh>>::output<nn::features<3, 8>>,
                             nn::features<3, 16>>);
static_assert(std::is_same_v<nn::branches<nn::join_concat, nn::linear<4, 3>, nn::linear<4, 5>>::output<nn::features<4>>,
                             nn::features<8>>);
static_assert(std::is_same_v<nn::branches<nn::join_add, nn::linear<4, 3>, nn::chain<nn::linear<4, 2>, nn::linear<2, 3>>>::output<nn::features<4>>,
                             nn::features<3>>);
static_assert(std::is_same_v<nn::recomputed<mlp_block>::block, mlp_block>);
static_assert(std::is_same_v<nn::recomputed<nn::linear<4, 4>, nn::relu>::block, nn::chain<nn::linear<4, 4>, nn::relu>>);
static_assert(nn::is_composite_v<mlp_block> && nn::is_composite_v<nn::recomputed<mlp_block>> && !nn::is_composite_v<nn::relu>);

TEST_CASE("chain: gradients against central differences, alone and between layers") {
  nn_test::check_gradients<nn::sequential<nn::features<5>, nn::chain<nn::linear<5, 7, nn::tanh_activation>, nn::linear<7, 3>>>>(3, 101);
  nn_test::check_gradients<nn::sequential<nn::features<5>, nn::linear<5, 6>,
                                          nn::chain<nn::layernorm<6>, nn::linear<6, 4, nn::gelu_tanh>, nn::sigmoid_activation>,
                                          nn::linear<4, 2>>>(4, 102);
  nn_test::check_gradients<nn::sequential<nn::features<4>, nn::chain<nn::linear<4, 3>>>>(2, 103);  // a chain of one
}

TEST_CASE("residual: gradients against central differences, flat and per position") {
  nn_test::check_gradients<nn::sequential<nn::features<6>, mlp_block>>(3, 111);
  nn_test::check_gradients<nn::sequential<nn::features<6>, mlp_block, mlp_block, nn::linear<6, 2>>>(3, 112);
  nn_test::check_gradients<nn::sequential<nn::features<3, 5>, nn::residual<nn::layernorm<5>, nn::tanh_activation>>>(2, 113);
}

TEST_CASE("branches: gradients against central differences, added and concatenated") {
  using added = nn::branches<nn::join_add, nn::chain<nn::linear<5, 8, nn::tanh_activation>, nn::linear<8, 4>>,
                             nn::linear<5, 4>, nn::chain<nn::linear<5, 4>, nn::sigmoid_activation>>;
  nn_test::check_gradients<nn::sequential<nn::features<5>, added>>(3, 121);
  nn_test::check_gradients<nn::sequential<nn::features<5>, nn::linear<5, 5>, added, nn::linear<4, 3>>>(3, 122);
  using concatenated = nn::branches<nn::join_concat, nn::linear<5, 3, nn::tanh_activation>, nn::chain<nn::linear<5, 2>, nn::linear<2, 4>>>;
  nn_test::check_gradients<nn::sequential<nn::features<5>, concatenated, nn::linear<7, 2>>>(3, 123);
  // Per position: [4, 6] and [4, 6] give [4, 12].
  using per_position = nn::branches<nn::join_concat, nn::layernorm<6>, nn::chain<nn::tanh_activation, nn::layernorm<6>>>;
  nn_test::check_gradients<nn::sequential<nn::features<4, 6>, per_position, nn::layernorm<12>>>(2, 124);
  nn_test::check_gradients<nn::sequential<nn::features<3>, nn::branches<nn::join_add, nn::linear<3, 3>>>>(2, 125);  // one branch
}

TEST_CASE("nested composites: gradients against central differences") {
  // branches inside a residual inside a chain inside branches.
  using inner = nn::residual<nn::layernorm<6>,
                             nn::branches<nn::join_concat, nn::linear<6, 2, nn::tanh_activation>, nn::linear<6, 4>>>;
  using outer = nn::branches<nn::join_add, nn::chain<inner, nn::linear<6, 3>>, nn::chain<nn::linear<6, 3>, nn::residual<nn::linear<3, 3>>>>;
  nn_test::check_gradients<nn::sequential<nn::features<6>, outer, nn::linear<3, 2>>>(3, 131);
  nn_test::check_gradients<nn::sequential<nn::features<6>, nn::chain<nn::chain<mlp_block, mlp_block>, nn::residual<mlp_block>>>>(2, 132);
}

TEST_CASE("SwiGLU, written against the layer protocol: gradients against central differences") {
  nn_test::check_gradients<nn::sequential<nn::features<6>, example::swiglu<6, 10>>>(3, 141);
  nn_test::check_gradients<nn::sequential<nn::features<4, 8>, example::swiglu<8, 5>>>(2, 142);
  nn_test::check_gradients<nn::sequential<nn::features<4, 8>, token_block, token_block>>(2, 143);
}

TEST_CASE("recomputed: gradients against central differences, dropout inside at a fixed step") {
  nn_test::check_gradients<nn::sequential<nn::features<6>, nn::recomputed<mlp_block>, nn::linear<6, 3>>>(3, 151);
  nn_test::check_gradients<nn::sequential<nn::features<6>, nn::chain<nn::recomputed<mlp_block>, nn::recomputed<mlp_block>>>>(3, 152);
  nn_test::check_gradients<nn::sequential<nn::features<4, 8>, nn::recomputed<token_block>, nn::recomputed<nn::recomputed<token_block>>>>(2, 153);
  const nn::run_mode step_three{true, 3};
  using with_dropout = nn::residual<nn::linear<6, 12, nn::relu>, nn::dropout<30>, nn::linear<12, 6>>;
  nn_test::check_gradients<nn::sequential<nn::features<6>, nn::recomputed<with_dropout>, nn::recomputed<nn::dropout<20>, nn::linear<6, 2>>>>(
      4, 154, 1e-6, 40, step_three);
}
