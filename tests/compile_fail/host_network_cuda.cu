// A host_space network (and input) run on the cuda executor: must not compile
// (under nvcc), and the message must say that the executor cannot reach the
// network's memory. (With FUSOR_COMPILE_FAIL undefined, the network and its
// input are device_space and it must compile.)
#include <fusor/exec/cuda.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

namespace nn = fusor::nn;

int main() {
#ifdef FUSOR_COMPILE_FAIL
  using space = fusor::host_space;
#else
  using space = fusor::device_space;
#endif
  using mlp = nn::sequential<nn::features<4>, nn::linear<4, 2>>;
  nn::network<mlp, fusor::fp32, space> net(/*max_batch=*/8);
  fusor::tensor<float, fusor::extents<fusor::index_t, 8, 4>, fusor::row_major, space> x;
  net.forward(x, fusor::cuda_executor{});
}
