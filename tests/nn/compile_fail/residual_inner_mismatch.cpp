// Compile-fail program (tests/suites/composition.cmake): inside the residual,
// the second linear wants 16 features but the first makes 32; the error must
// name the position inside the residual, both layers and both features, as
// sequential<> does. (Without FUSOR_COMPILE_FAIL the sizes agree.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/nn/residual.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using block = nn::residual<nn::linear<16, 32, nn::relu>, nn::linear<16, 16>>;
#else
using block = nn::residual<nn::linear<16, 32, nn::relu>, nn::linear<32, 16>>;
#endif
using model = nn::sequential<nn::features<16>, block, nn::linear<16, 4>>;

int main() {
  nn::network<model> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
