// bench/gpt_host.cpp — training-step throughput of examples/gpt_char's small
// GPT on the host (issue 13), in tokens/s (items_per_second): one
// optim::trainer::step (forward, sequence cross-entropy, backward, gradient
// norm with clipping, AdamW) per iteration, fp32, on random token windows
// (fixed seed; eight batches cycled). bench/gpt_torch.py times the same model,
// batches and optimizer in PyTorch eager on the CPU and prints both side by side.
//
//   OMP_WAIT_POLICY=passive /usr/bin/python3 bench/gpt_torch.py --run build/bench/bench_gpt_host
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

#include "gpt_model.hpp"

namespace {
namespace fs = fusor;
namespace nn = fusor::nn;
namespace optim = fusor::optim;

// examples/gpt_char's small model: vocabulary 96, context 128, 128 channels, 4 heads, 4 blocks.
using small = gpt::config<96, 128, 128, 4, 4>;
using network_t = nn::network<gpt::model<small>, fs::fp32, fs::host_space>;
using trainer_t = optim::trainer<network_t, optim::adamw>;
using ids = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 2>>;

void fusor_gpt_step(benchmark::State& state) {
  const fs::index_t batch = state.range(0), context = small::context;
  const fs::host_executor ex{};
  network_t net(batch, {.seed = 1});
  // torch.optim.AdamW(lr=1e-3, weight_decay=0.1) with clipping at norm 1, as gpt_torch.py.
  trainer_t trainer(net,
                    {.schedule = optim::learning_rate_schedule::constant(1e-3f), .clip = {.max_norm = 1.0f}},
                    optim::adamw_options{.weight_decay = 0.1f});
  trainer.initialize(ex);
  std::mt19937 engine(2026);
  std::uniform_int_distribution<std::int32_t> token(0, std::int32_t(small::vocabulary) - 1);
  std::vector<ids> inputs, targets;
  for (int b = 0; b < 8; ++b) {
    inputs.emplace_back(batch, context);
    targets.emplace_back(batch, context);
    for (fs::index_t i = 0; i < batch * context; ++i) inputs.back().data()[i] = token(engine);
    for (fs::index_t i = 0; i < batch * context; ++i) targets.back().data()[i] = token(engine);
  }
  trainer.step(inputs[0], targets[0], ex);  // first touch of every buffer
  trainer.loss().reset(ex);
  int k = 0;
  for (auto _ : state) {
    trainer.step(inputs[std::size_t(k)], targets[std::size_t(k)], ex);
    k = (k + 1) % 8;
  }
  const double loss = trainer.loss().totals().mean_loss;  // random targets: near ln 96 = 4.56
  if (!std::isfinite(loss) || loss > 6.0) state.SkipWithError("the loss is not finite or grew past 6");
  state.counters["loss"] = loss;
  state.SetItemsProcessed(state.iterations() * batch * context);
}
BENCHMARK(fusor_gpt_step)->Arg(16)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
