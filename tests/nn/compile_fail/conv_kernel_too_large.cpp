// Compile-fail program (tests/suites/nn.cmake): a 5 x 5 kernel over a 4 x 4
// image without padding, so the network must not compile, and the error must
// say so in at most five lines, naming the kernel, the padding and the image.
// (Without FUSOR_COMPILE_FAIL the padding is 1 and it must compile.)
#include <fusor/nn/conv2d.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using cnn = nn::sequential<nn::features<1, 4, 4>, nn::conv2d<1, 2, 5>>;
#else
using cnn = nn::sequential<nn::features<1, 4, 4>, nn::conv2d<1, 2, 5, 1, 1>>;
#endif

int main() {
  nn::network<cnn> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
