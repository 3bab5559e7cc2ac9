// Compile-fail program (tests/suites/composition.cmake): inside the second
// branch, recomputed, the second linear wants 8 features but the first makes 6;
// the error must name the position inside that chain, both layers and both
// features, as sequential<> does, though the chain is two composites deep.
// (Without FUSOR_COMPILE_FAIL the sizes agree.)
#include <fusor/nn/branches.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/nn/recompute.hpp>

namespace nn = fusor::nn;
#ifdef FUSOR_COMPILE_FAIL
using second = nn::recomputed<nn::linear<5, 6, nn::relu>, nn::linear<8, 4>>;
#else
using second = nn::recomputed<nn::linear<5, 6, nn::relu>, nn::linear<6, 4>>;
#endif
using block = nn::branches<nn::join_add, nn::chain<nn::linear<5, 8, nn::relu>, nn::linear<8, 4>>, second>;
using model = nn::sequential<nn::features<5>, block, nn::linear<4, 2>>;

int main() {
  nn::network<model> net(8);
  return static_cast<int>(net.max_batch()) - 8;
}
