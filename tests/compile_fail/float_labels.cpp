// Labels stored as float given to the trainer (a dtype mix: class indices are
// integers): must not compile, and the message must say to store them as int32.
// (With FUSOR_COMPILE_FAIL undefined, the labels are std::int32_t and it must compile.)
#include <cstdint>

#include <fusor/nn/linear.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

namespace nn = fusor::nn;

using mlp = nn::sequential<nn::features<4>, nn::linear<4, 3>>;
using batch = fusor::extents<fusor::index_t, 8>;

int main() {
  nn::network<mlp> net(/*max_batch=*/8);
  fusor::optim::trainer<decltype(net), fusor::optim::adamw> train(net, {}, fusor::optim::adamw_options{});
  fusor::tensor<float, fusor::extents<fusor::index_t, 8, 4>> images;
#ifdef FUSOR_COMPILE_FAIL
  fusor::tensor<float, batch> labels;
#else
  fusor::tensor<std::int32_t, batch> labels;
#endif
  train.step(images, labels, fusor::host_executor{});
}
