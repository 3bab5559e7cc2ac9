// Compile-fail program (tests/suites/nn.cmake): the convolution leaves a 2 x 2
// image and the pooling window is 3 x 3, so the network must not compile, and
// the error must say so, naming the window and the image. (Without
// FUSOR_COMPILE_FAIL the window is 2 x 2 and it must compile.)
#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/max_pool2d.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using cnn = nn::sequential<nn::features<3, 4, 4>, nn::conv2d<3, 2, 3>, nn::max_pool2d<3>>;
#else
using cnn = nn::sequential<nn::features<3, 4, 4>, nn::conv2d<3, 2, 3>, nn::max_pool2d<2>>;
#endif

int main() {
  nn::network<cnn> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
