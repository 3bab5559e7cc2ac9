// Compile-fail program (tests/suites/nn.cmake): nn::linear has one layout,
// row-major weights (PyTorch's), so naming column-major must not compile
// rather than be ignored. (Without FUSOR_COMPILE_FAIL it names row_major,
// the default, and must compile.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using mlp = nn::sequential<nn::features<5>, nn::linear<5, 3, nn::identity, nn::layout<fusor::col_major>>>;
#else
using mlp = nn::sequential<nn::features<5>, nn::linear<5, 3, nn::identity, nn::layout<fusor::row_major>>>;
#endif

int main() {
  nn::network<mlp> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
