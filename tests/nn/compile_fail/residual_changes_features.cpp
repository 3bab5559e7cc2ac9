// Compile-fail program (tests/suites/composition.cmake): the layers inside the
// residual turn features<16> into features<32>, so y = x + f(x) cannot be
// formed; the error must name both features. (Without FUSOR_COMPILE_FAIL the
// chain gives back features<16> and it must compile.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/nn/residual.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using block = nn::residual<nn::linear<16, 32, nn::relu>>;
#else
using block = nn::residual<nn::linear<16, 32, nn::relu>, nn::linear<32, 16>>;
#endif
using model = nn::sequential<nn::features<16>, block, nn::linear<16, 4>>;

int main() {
  nn::network<model> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
