// tests/docs/doc_snippets.cpp — the C++ blocks of README.md and docs/*.md,
// compiled (host code; the blocks that name the GPU's types are in
// doc_snippets_cuda.cu). Each block sits verbatim between a "// doc-snippet"
// line and a "// end doc-snippet" line, with what it needs declared around
// it; check_doc_snippets.py fails when a block of the docs is missing here or
// a snippet here no longer matches one. Nothing here is run: the tests named
// in the docs run the same calls.
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include <fusor/fusor.hpp>
#include <fusor/app/fit.hpp>
#include <fusor/comm/mpi.hpp>
#include <fusor/data/fashion_mnist.hpp>
#include <fusor/data/loader.hpp>
#include <fusor/kernels/matmul.hpp>
#include <fusor/parallel/distributed_checkpoint.hpp>
#include <fusor/parallel/mesh.hpp>

#include "nn/swiglu_layer.hpp"

namespace doc_snippets {

namespace nn = fusor::nn;
using fusor::index_t;
using matrix = fusor::dextents<index_t, 2>;
using vector = fusor::dextents<index_t, 1>;
using host_matrix = fusor::tensor<float, matrix>;
using host_vector = fusor::tensor<float, vector>;

// README.md, "Matrix products": y [n, out], x [n, in], w [out, in]; a second
// layer's backward with dy [n, out2], w2 [out2, hidden], h [n, hidden].
void readme_matmul() {
  const index_t n = 8, in = 6, out = 5, hidden = 5, out2 = 4;
  host_matrix y(n, out), x(n, in), w(out, in), pre(n, out), residual(n, out);
  host_vector b(out);
  host_matrix dpre(n, hidden), dy(n, out2), w2(out2, hidden), dw2(out2, hidden), h(n, hidden);
  host_vector db(hidden), db2(out2);
  const fusor::host_executor executor{};
  // doc-snippet README.md
  #include <fusor/kernels/matmul.hpp>
  // y = gelu_tanh(x w^T + b), keeping the pre-activation for backward: one cuBLASLt call
  // (pre's row stride a multiple of 8 elements, cuBLASLt's rule, on the host too).
  fusor::matmul(y, x, fusor::transpose(w.view()), fusor::epilogue::gelu_tanh(b, pre), executor);
  // Its backward: dpre = (dy w2) * gelu_tanh'(pre) and db = column sums of dpre, one call;
  // the weight gradient dw2 = dy^T h with db2 = column sums of dy, one call.
  fusor::matmul(dpre, dy, w2, fusor::epilogue::gelu_tanh_backward(pre, db), executor);
  fusor::matmul(dw2, fusor::transpose(dy.view()), h, fusor::epilogue::bias_gradient_a(db2), executor);
  // Any other elementwise work on the product: one more fused pass.
  fusor::matmul(y, x, fusor::transpose(w.view()),
                fusor::epilogue::expression([&](auto acc) { return fusor::silu(acc) + residual; }), executor);
  // end doc-snippet
}

using mlp = nn::sequential<nn::features<784>, nn::linear<784, 512, nn::relu>, nn::linear<512, 256, nn::relu>,
                           nn::linear<256, 10>>;

// README.md, the epoch loop as one call.
void readme_fit() {
  const fusor::host_executor ex{};
  nn::network<mlp, fusor::fp32> net(256, {.seed = 1});
  fusor::optim::trainer<decltype(net), fusor::optim::adamw> trainer(net, {}, fusor::optim::adamw_options{});
  auto train_set = fusor::data::load_fashion_mnist(fusor::data::split::train);
  auto test_set = fusor::data::load_fashion_mnist(fusor::data::split::test);
  fusor::data::loader<fusor::host_space> train_loader(train_set, {.batch_size = 256});
  fusor::data::loader<fusor::host_space> test_loader(test_set, {.batch_size = 256});
  // doc-snippet README.md
  fusor::app::fit_result r = fusor::app::fit(trainer, train_loader, test_loader, ex,
                                             {.epochs = 20, .checkpoint = "run.safetensors", .resume = true,
                                              .best_checkpoint = "best.safetensors", .patience = 3,
                                              .metrics = "run.csv"});
  std::printf("best epoch %d, final accuracy %.2f%%\n", r.best_epoch, 100 * r.validation.accuracy);
  // end doc-snippet
}

// README.md, a GPT of blocks (the GPT example's sizes).
namespace readme_gpt {
constexpr std::size_t T = 16, V = 65, C = 32, H = 4;
// doc-snippet README.md
template <std::size_t C, std::size_t H>
using attention_block = nn::residual<nn::layernorm<C>, nn::linear<C, 3 * C>,      // per token: [batch, T, C]
                                     nn::causal_attention<H, C / H>,              // fused, never T x T
                                     nn::linear<C, C>>;
template <std::size_t C>
using mlp_block = nn::residual<nn::layernorm<C>, nn::linear<C, 4 * C, nn::gelu_tanh>, nn::linear<4 * C, C>>;

using table_init = nn::init_std<2, 100>;  // GPT-2's tables: deviation 0.02 (1 by default would start the
                                          // tied head's loss far above log V)
using gpt = nn::sequential<nn::features<T>,                     // T int32 token ids
                           nn::embedding<V, C, table_init>, nn::position_embedding<T, C, table_init>,
                           attention_block<C, H>, mlp_block<C>, /* ... */
                           nn::layernorm<C>, nn::tied_linear<C, V, 0>>;  // logits [batch, T, V]: x wte^T,
                                                                      // the head tied to layer 0's table
// optim::trainer takes labels [batch, T]: the loss is over every token (ignore_index -100 skipped).
// end doc-snippet
void build() {
  nn::network<gpt, fusor::fp32> net(4, {.seed = 1});
  fusor::optim::trainer<decltype(net), fusor::optim::adamw> trainer(net, {}, fusor::optim::adamw_options{});
}
}  // namespace readme_gpt

// README.md, checkpoints.
void readme_checkpoint(int step) {
  host_matrix w(512, 784), m(512, 784);
  // doc-snippet README.md
  fusor::io::checkpoint_writer writer;
  writer.add("fc1.weight", w);            // host or device tensor/view, any gap-free layout
  writer.add("adamw.m.fc1.weight", m);
  writer.add_metadata("step", std::to_string(step));
  writer.save("run/model.safetensors");   // temporary file, fsync, rename, fsync of the directory

  fusor::io::checkpoint_reader reader("run/model.safetensors");  // read and validated once
  reader.read("fc1.weight", w);           // checkpoint_error names the tensor, both shapes or dtypes, the file
  const int resumed_at = std::stoi(reader.metadata("step"));
  // end doc-snippet
  (void)resumed_at;
}

// README.md, sharded checkpoints: rank `rank` of 8 holds half of 0.weight's rows (tp_rank of 2).
void readme_sharded_checkpoint(int rank, int ranks, int tp_rank, int r) {
  host_matrix w(256, 784), w4(128, 784);
  const auto barrier = [] {};
  // doc-snippet README.md
  fusor::io::shard_writer shard("run/step-1200", rank, ranks, "step-1200");
  shard.add("0.weight", fusor::io::tensor_piece::slice({512, 784}, 0, tp_rank, 2), w);  // this rank's rows
  shard.save();                                   // shard-00003-of-00008.safetensors (+ .index), atomically
  barrier();                                      // yours, e.g. an all-reduce waited on: every shard saved
  if (rank == 0) fusor::io::write_manifest("run/step-1200", ranks, "step-1200", {{"step", "1200"}});

  fusor::io::sharded_checkpoint_reader ckpt("run/step-1200");   // refused without a manifest: unfinished save
  ckpt.read("0.weight", fusor::io::tensor_piece::slice({512, 784}, 1, r, 4), w4);  // another split
  // end doc-snippet
}

// README.md, the collectives (a program of its own there: its main here in a namespace).
namespace readme_collectives {
host_vector gradients(100), full(100), shard(25), weights(100);
// doc-snippet README.md
#include <fusor/comm/mpi.hpp>
int main(int argc, char** argv) {
  return fusor::comm::run_ranks(argc, argv, [&](fusor::comm::mpi& c) {  // MPI_Init .. MPI_Finalize
    c.all_reduce(gradients, fusor::comm::reduction_op::avg).wait();      // sum, avg, max
    c.reduce_scatter(full, shard, fusor::comm::reduction_op::sum).wait();
    c.all_gather(shard, full).wait();
    c.broadcast(weights, 0).wait();
    return 0;
  });
}
// end doc-snippet
}  // namespace readme_collectives

const fusor::optim::learning_rate_schedule schedule = fusor::optim::learning_rate_schedule::constant(1e-3f);

// README.md, data parallel.
void readme_data_parallel(const host_matrix& global_images, const fusor::tensor<std::int32_t, vector>& global_labels) {
  const fusor::host_executor ex{};
  // doc-snippet README.md
  fusor::comm::mpi world;                                         // inside fusor::comm::run_ranks
  nn::network<mlp, fusor::fp32> net(128 / world.size(), {.seed = 1});
  fusor::parallel::data_parallel<decltype(net), fusor::optim::adamw, fusor::comm::mpi> trainer(
      net, world, {.schedule = schedule}, fusor::optim::adamw_options{.weight_decay = 1e-4f},
      {.bucket_bytes = 1 << 20, .overlap = true, .micro_batches = 1,
       .communication = fusor::parallel::gradient_communication::native,  // or bf16: half the bytes
       .shard_optimizer_state = false,                                    // true: ZeRO-1
       .shard_gradients = false,                                          // true: ZeRO-2
       .shard_parameters = false});                                       // true: ZeRO-3
  trainer.initialize(ex);                            // rank 0's parameters to every rank
  trainer.step(global_images, global_labels, ex);    // the GLOBAL batch: this rank takes its rows
  fusor::nn::loss_totals t = trainer.totals();       // over every rank (a collective)
  // end doc-snippet
  (void)t;
}

// README.md, tensor parallel.
namespace readme_tensor_parallel {
// doc-snippet README.md
template <int Ways>
using mlp = nn::sequential<nn::features<784>,
    nn::linear<784, 512, nn::relu, nn::parallel<nn::column_parallel<Ways>>>,  // 512 / Ways features a rank
    nn::linear<512, 256, nn::relu, nn::parallel<nn::row_parallel<Ways>>>,     // summed over the ranks: all 256
    nn::linear<256, 10>>;                                                     // whole on every rank
// end doc-snippet
int train(fusor::comm::mpi& world, const host_matrix& images, const fusor::tensor<std::int32_t, vector>& labels) {
  const fusor::host_executor ex{};
  const fusor::optim::trainer_options options{.schedule = schedule};
  const fusor::optim::adamw_options adamw_options{};
  // doc-snippet README.md (continued)

  // The degree is compiled in (activations have static shapes): pick the one for this run.
  return fusor::parallel::dispatch_tensor_parallel<1, 2, 4, 8>(world.size(), {512}, [&]<int Ways>() {
    nn::network<mlp<Ways>, fusor::fp32> net(128, {.seed = 1});
    fusor::parallel::tensor_parallel tp(net, world);  // checks degrees, connects, draws this rank's slices
    fusor::optim::trainer<decltype(net), fusor::optim::adamw> trainer(net, options, adamw_options);
    trainer.reduce_gradient_norm_with(tp);            // clipping and the Inf/NaN skip by the global norm
    trainer.initialize(ex);
    trainer.step(images, labels, ex);                  // the same batch on every rank
    return 0;
  });
  // end doc-snippet
}
}  // namespace readme_tensor_parallel

// README.md, pipeline parallel.
void readme_pipeline(fusor::comm::mpi& world, const host_matrix& images,
                     const fusor::tensor<std::int32_t, vector>& labels) {
  const fusor::host_executor ex{};
  // doc-snippet README.md
  fusor::parallel::pipeline<mlp, fusor::fp32, fusor::host_space, fusor::optim::adamw, fusor::comm::mpi> train(
      world, 128, {.seed = 1}, {.schedule = schedule}, fusor::optim::adamw_options{.weight_decay = 1e-4f},
      {.micro_batches = 8,
       .schedule = fusor::parallel::pipeline_schedule::one_forward_one_backward,  // or gpipe
       .stage_starts = {0, 1}});                  // first layer of each stage; {}: layers split evenly
  train.initialize(ex);
  train.step(images, labels, ex);                 // the global batch: stage 0 reads images, the last stage labels
  fusor::nn::loss_totals t = train.totals();      // the last stage's, on every rank (a collective)
  fusor::parallel::pipeline_report r = train.report();  // bubble (p-1)/m and this rank's measured idle time
  // end doc-snippet
  (void)t, (void)r;
}

// README.md, the device mesh and what composes over it.
void readme_mesh() {
  // doc-snippet README.md
  namespace fs = fusor;  // as in the examples (not std::filesystem)
  fs::comm::mpi world;                                                 // 8 ranks
  fs::parallel::mesh grid(world, {.data = 2, .tensor = 2, .pipeline = 2});
  grid.at();                 // {data, tensor, pipeline} of this rank
  grid.tensor().size();      // 2: the ranks splitting this rank's layers
  grid.data(); grid.pipeline();
  // end doc-snippet
}
namespace fs = fusor;
void readme_mesh_data_tensor(fs::parallel::mesh<fs::comm::mpi>& grid) {
  nn::network<readme_tensor_parallel::mlp<2>, fs::fp32> net(64, {.seed = 1});
  const fs::optim::trainer_options options{.schedule = schedule};
  const fs::optim::adamw_options adamw{};
  // doc-snippet README.md
  fs::parallel::tensor_parallel tp(net, grid.tensor());
  fs::parallel::data_parallel<decltype(net), fs::optim::adamw, fs::comm::mpi> train(net, grid.data(), options, adamw);
  train.reduce_gradient_norm_with(tp);
  // end doc-snippet
}
void readme_mesh_data_pipeline(fs::parallel::mesh<fs::comm::mpi>& grid, fs::comm::mpi& world) {
  const index_t global_batch = 256;
  const fs::optim::trainer_options options{.schedule = schedule};
  const fs::optim::adamw_options adamw{};
  const fs::host_executor ex{};
  // doc-snippet README.md
  fs::parallel::pipeline<mlp, fs::fp32, fs::host_space, fs::optim::adamw, fs::comm::mpi> train(
      grid.pipeline(), grid.data(), global_batch / grid.shape().data, {.seed = 1}, options, adamw,
      {.micro_batches = 8}, {.shard_optimizer_state = true});
  // end doc-snippet
  // README.md, distributed checkpoints (of that pipeline).
  // doc-snippet README.md
  const auto where = fs::parallel::checkpoint_rank_of(grid);   // {shape, this rank's coordinates}
  fs::parallel::save_distributed_latest("run", train, world, where, "step-1200", {{"epoch", "3"}}, ex);
  // run/step-1200/shard-0000r-of-00008.safetensors ..., manifest last; run/latest names it
  // ...
  train.initialize(ex);                                        // any mesh, any number of ranks
  if (const auto last = fs::parallel::latest_distributed_save("run"))
    fs::parallel::load_distributed(*last, train, world, where, ex);  // returns the metadata
  // end doc-snippet
}

// docs/layers.md, a model of composites.
namespace layers_composites {
// doc-snippet docs/layers.md
using attention_free_block = nn::residual<nn::layernorm<64>, example::swiglu<64, 172>>;
using model = nn::sequential<nn::features<16, 64>,                      // 16 positions x 64 channels
                             nn::chain<nn::recomputed<attention_free_block>,
                                       nn::recomputed<attention_free_block>>,
                             nn::branches<nn::join_concat, nn::layernorm<64>,
                                          nn::chain<nn::tanh_activation, nn::layernorm<64>>>,
                             nn::flatten, nn::linear<16 * 128, 10>>;
// end doc-snippet
void build() { nn::network<model, fusor::fp32> net(2, {.seed = 1}); }
}  // namespace layers_composites

// docs/developer_guide.md, a GPT block split over W tensor-parallel ranks.
namespace guide_tensor_parallel_gpt {
// doc-snippet docs/developer_guide.md
template <std::size_t C, std::size_t H, int W>   // W must divide H
using attention_block = nn::residual<nn::layernorm<C>,
    nn::linear<C, 3 * C, nn::identity, nn::parallel<nn::column_parallel<W, 3>>>,  // [q | k | v] of H / W heads
    nn::causal_attention<H / W, C / H>,
    nn::linear<C, C, nn::identity, nn::parallel<nn::row_parallel<W>>>>;           // summed: whole C
template <std::size_t C, int W>
using mlp_block = nn::residual<nn::layernorm<C>,
    nn::linear<C, 4 * C, nn::gelu_tanh, nn::parallel<nn::column_parallel<W>>>,
    nn::linear<4 * C, C, nn::identity, nn::parallel<nn::row_parallel<W>>>>;
// end doc-snippet
using block = nn::sequential<nn::features<8, 32>, attention_block<32, 4, 2>, mlp_block<32, 2>>;
void build() { nn::network<block, fusor::fp32> net(2, {.seed = 1}); }
}  // namespace guide_tensor_parallel_gpt

}  // namespace doc_snippets
