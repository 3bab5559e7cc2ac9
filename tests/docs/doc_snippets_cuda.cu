// tests/docs/doc_snippets_cuda.cu — the C++ blocks of README.md that name the
// GPU's types (fusor::device_space, a CUDA stream), compiled by nvcc as
// doc_snippets.cpp compiles the others (see there). Nothing here is run.
#include <cstdint>

#include <fusor/fusor.hpp>
#include <fusor/data/fashion_mnist.hpp>
#include <fusor/data/loader.hpp>

namespace doc_snippets_cuda {

namespace nn = fusor::nn;
using fusor::index_t;

// README.md, "Training": a step on the GPU in bf16.
void readme_training(cudaStream_t stream, fusor::data::loader<fusor::device_space>& loader) {
  const fusor::cuda_executor ex{stream};
  // doc-snippet README.md
  namespace nn = fusor::nn;
  using mlp = nn::sequential<nn::features<784>,               // one sample: 784 values
                             nn::linear<784, 512, nn::relu>,  // bias + ReLU fused into the matmul
                             nn::linear<512, 256, nn::relu>,
                             nn::linear<256, 10>>;

  nn::network<mlp, fusor::bf16, fusor::device_space> net(256, {.seed = 1, .stream = stream});
  fusor::optim::trainer<decltype(net), fusor::optim::adamw> trainer(
      net, {.schedule = fusor::optim::learning_rate_schedule::warmup_cosine(1e-3f, 200, 4000), .stream = stream},
      fusor::optim::adamw_options{.weight_decay = 1e-4f});
  trainer.initialize(ex);                       // fp32 master weights from the bf16 parameters
  while (const auto* b = loader.next()) trainer.step(b->images, b->labels, ex);
  fusor::nn::loss_totals t = trainer.loss().totals();   // mean loss, accuracy: the one wait
  fusor::optim::save_training_state("run.safetensors", trainer, {{"epoch", "1"}});
  // end doc-snippet
  (void)t;
}

// README.md, "Optimizers": the trainer's parts in a loop of one's own, fp16 parameters.
void readme_optimizers(cudaStream_t stream) {
  using flat = fusor::dextents<index_t, 1>;
  fusor::tensor<fusor::fp16, flat, fusor::row_major, fusor::device_space> params(flat(1000), stream);
  fusor::tensor<fusor::fp16, flat, fusor::row_major, fusor::device_space> grads(flat(1000), stream);
  fusor::optim::magnitude_pruning<fusor::device_space> pruning(params.size(), stream);
  const fusor::cuda_executor ex{stream};
  // doc-snippet README.md
  namespace optim = fusor::optim;
  optim::update_controller<fusor::device_space> controller(
      optim::learning_rate_schedule::warmup_cosine(1e-3f, 200, 4000), {.max_norm = 1.0f}, {.dynamic = true}, stream);
  optim::adamw<fusor::fp16, fusor::device_space> adamw(params.size(), {.weight_decay = 0.01f}, stream);
  adamw.initialize(params, ex);                           // fp32 master weights from the fp16 parameters
  // every step (backward multiplied the loss by optim::scalar(controller.scalars().loss_scale())):
  controller.begin_step(ex);
  controller.accumulate_gradient_norm(grads, ex);         // once per buffer: global norm, Inf/NaN check
  controller.prepare_update(ex);                          // skip flag, unscale x clip multiplier, learning rate
  adamw.step(params, grads, controller.scalars(), ex);    // ONE fused pass: moments, master, parameters
  pruning.apply(params, adamw, ex);                       // optional: masked weights stay exactly 0
  controller.finish_step(ex);                             // step count; loss scale x0.5 on overflow, x2 after 2000 clean steps
  // end doc-snippet
}

// README.md, "Input pipeline".
void readme_loader(cudaStream_t stream, std::uint64_t epochs) {
  const auto step = [](const auto&, const auto&) {};
  // doc-snippet README.md
  #include <fusor/data/fashion_mnist.hpp>  // from the Debian package dataset-fashion-mnist
  #include <fusor/data/loader.hpp>
  auto train = fusor::data::load_fashion_mnist(fusor::data::split::train);  // or (split, directory)
  fusor::data::loader<fusor::device_space> batches(train, {.batch_size = 256, .seed = 1,
                                                          .mean = 0.2860f, .std = 0.3530f}, stream);
  for (std::uint64_t epoch = 0; epoch < epochs; ++epoch) {
    batches.start_epoch(epoch);                  // the order is fixed by (seed, epoch)
    while (const auto* b = batches.next())       // b->images [size, 784] fp32, b->labels [size] int32
      step(b->images, b->labels);                // queued on `stream`, after the batch's copy
  }
  // end doc-snippet
}

}  // namespace doc_snippets_cuda
