// Compile-fail program (tests/suites/nn.cmake): the images have 3 channels and
// the convolution wants 1, so the network must not compile, and the error must
// name the layer and both feature shapes. (Without FUSOR_COMPILE_FAIL the
// channels agree and it must compile.)
#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using cnn = nn::sequential<nn::features<3, 8, 8>, nn::conv2d<1, 4, 3>>;
#else
using cnn = nn::sequential<nn::features<3, 8, 8>, nn::conv2d<3, 4, 3>>;
#endif

int main() {
  nn::network<cnn> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
