// Compile-fail program (tests/suites/nn.cmake): the second linear wants 128
// features but the first makes 256, so the network must not compile, and the
// error must name both layers and both sizes. (Without FUSOR_COMPILE_FAIL the
// sizes agree and it must compile.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 256, nn::relu>, nn::linear<128, 10>>;
#else
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 256, nn::relu>, nn::linear<256, 10>>;
#endif

int main() {
  nn::network<mlp> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
