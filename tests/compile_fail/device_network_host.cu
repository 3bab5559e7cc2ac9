// A device_space network (and input) run on the host executor, in a .cu file
// where it can be built: must not compile (under nvcc), and the message must
// say that the executor cannot reach the network's memory. (With
// FUSOR_COMPILE_FAIL undefined, the executor is the cuda executor and it must compile.)
#include <fusor/exec/cuda.hpp>
#include <fusor/exec/host.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;

int main() {
#ifdef FUSOR_COMPILE_FAIL
  const fusor::host_executor ex{};
#else
  const fusor::cuda_executor ex{};
#endif
  using mlp = nn::sequential<nn::features<4>, nn::linear<4, 2>>;
  nn::network<mlp, fusor::fp32, fusor::device_space> net(/*max_batch=*/8);
  fusor::tensor<float, fusor::extents<fusor::index_t, 8, 4>, fusor::row_major, fusor::device_space> x;
  net.forward(x, ex);
}
