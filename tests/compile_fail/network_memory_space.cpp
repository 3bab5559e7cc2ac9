// A device_space network (and input) run on the host executor: must not
// compile, and the message must say that the executor cannot reach the
// network's memory. (A device network is built in a .cu file, device_network_host.cu
// under nvcc; a function taking one by reference, as a training step does,
// makes the same mistake in any translation unit.)
// (With FUSOR_COMPILE_FAIL undefined, the network and its input are host_space and it must compile.)
#include <fusor/exec/host.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;

#ifdef FUSOR_COMPILE_FAIL
using space = fusor::device_space;
#else
using space = fusor::host_space;
#endif
using mlp = nn::sequential<nn::features<4>, nn::linear<4, 2>>;
using batch = fusor::view<float, fusor::extents<fusor::index_t, 8, 4>, fusor::row_major, space>;

void forward(nn::network<mlp, fusor::fp32, space>& net, const batch& x) { net.forward(x, fusor::host_executor{}); }

int main() {}
