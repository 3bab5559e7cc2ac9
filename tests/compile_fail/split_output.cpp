// A network whose last layer is column-parallel given to a trainer: each rank would hold a slice of the
// logits, so the loss would train on a slice of the classes. Must not compile, and the message must say why.
// (With FUSOR_COMPILE_FAIL undefined, the last layer is row-parallel and it must compile.)
#include <cstdint>

#include <fusor/nn/linear.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

namespace nn = fusor::nn;

using column = nn::parallel<nn::column_parallel<2>>;
#ifdef FUSOR_COMPILE_FAIL
using last = nn::linear<8, 4, nn::identity, column>;
using mlp = nn::sequential<nn::features<4>, nn::linear<4, 8, nn::relu>, last>;
#else
using last = nn::linear<8, 4, nn::identity, nn::parallel<nn::row_parallel<2>>>;
using mlp = nn::sequential<nn::features<4>, nn::linear<4, 8, nn::relu, column>, last>;
#endif

int main() {
  nn::network<mlp> net(/*max_batch=*/8);
  fusor::optim::trainer<decltype(net), fusor::optim::adamw> train(net, {}, fusor::optim::adamw_options{});
  fusor::tensor<float, fusor::extents<fusor::index_t, 8, 4>> images;
  fusor::tensor<std::int32_t, fusor::extents<fusor::index_t, 8>> labels;
  train.step(images, labels, fusor::host_executor{});
}
