// A network whose layer sizes do not match: nn::linear<100, 10> after
// nn::features<784> (one sample of 784 features): must not compile, and the
// message must name the position, both layers and both feature shapes.
// (With FUSOR_COMPILE_FAIL undefined, the layer is nn::linear<784, 10> and it must compile.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;

#ifdef FUSOR_COMPILE_FAIL
using mlp = nn::sequential<nn::features<784>, nn::linear<100, 10>>;
#else
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 10>>;
#endif

int main() {
  nn::network<mlp> net(/*max_batch=*/8);
  return net.max_batch() == 8 ? 0 : 1;
}
