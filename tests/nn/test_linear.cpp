// nn::linear and nn::elementwise: backward against central differences (fp64,
// host), forward against a plain double loop (every executor), and the flat
// parameter buffers.
#include "nn/nn_test.hpp"

#include <fusor/nn/linear.hpp>

using namespace fusor;

TEST_CASE("linear: gradients against central differences, every activation") {
  nn_test::check_gradients<nn::sequential<nn::features<7>, nn::linear<7, 5>>>(3, 11);
  nn_test::check_gradients<nn::sequential<nn::features<7>, nn::linear<7, 5, nn::relu>>>(4, 12);
  nn_test::check_gradients<nn::sequential<nn::features<7>, nn::linear<7, 5, nn::gelu_tanh>>>(4, 13);
  nn_test::check_gradients<nn::sequential<nn::features<7>, nn::linear<7, 8, nn::gelu_tanh>>>(3, 16);  // fused in the epilogue
  nn_test::check_gradients<nn::sequential<nn::features<7>, nn::linear<7, 5, nn::tanh_activation>>>(2, 14);
  nn_test::check_gradients<nn::sequential<nn::features<9>, nn::linear<9, 6, nn::relu>, nn::linear<6, 4>,
                                          nn::sigmoid_activation, nn::linear<4, 3>>>(5, 15);
}
