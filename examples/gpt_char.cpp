// examples/gpt_char.cpp — a character-level GPT trained on Shakespeare's
// plays, then asked to write some more.
//
//   bash scripts/fetch_shakespeare.sh               # once (run_tests.sh does it too)
//   build/examples/gpt_char                         # the small model, on the host
//   build/examples/gpt_char_cuda --model nanogpt    # nanoGPT's character model, on a GPU
//   build/examples/gpt_char --checkpoint gpt.safetensors --resume --steps 3000
//   build/examples/gpt_char --checkpoint gpt.safetensors --resume --steps 0 --prompt "ROMEO." --generate 500
//
// Training: random windows of the first 90% of the text (data/character_corpus.hpp),
// AdamW with warmup and cosine decay, a progress bar with the loss and
// tokens/s, the validation loss on the last 10% every --eval-every steps
// (compared with the unigram baseline: what ignoring context gives), and a
// checkpoint there when --checkpoint is set; --resume continues from it
// exactly (batches are a function of the seed and the step). Then text is
// sampled from a prompt with a temperature and top-k, one character at a
// time with a key/value cache (gpt_decoder.hpp).
//
// Models (gpt_model.hpp): small (context 128, 4 blocks of 128 channels in 4
// heads: 0.8M parameters; sized for the host) and nanogpt (nanoGPT's
// shakespeare_char: context 256, 6 blocks of 384 channels in 6 heads, 10.7M).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fusor/app/command_line.hpp>
#include <fusor/data/character_corpus.hpp>
#include <fusor/data/epoch_engine.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/optim/training_checkpoint.hpp>

#include "gpt_decoder.hpp"
#include "gpt_model.hpp"

namespace {
namespace fs = fusor;
namespace nn = fusor::nn;
using vocabulary = fs::data::ascii_vocabulary;

struct options {
  std::string model = "small";
  long steps = 800;
  fs::index_t batch = 16;
  float learning_rate = 2e-3f;
  float weight_decay = 0.1f;
  long warmup = 100;
  long eval_every = 200;
  long eval_batches = 20;
  std::uint64_t seed = 1;
  std::filesystem::path data;   // default: $FUSOR_DATA_DIR or ~/.cache/fusor, shakespeare.txt
  std::string device = "auto";  // auto | host | cuda
  std::filesystem::path checkpoint;
  bool resume = false;
  std::string prompt = "\n";
  long generate = 300;
  float temperature = 0.8f;
  int top_k = 20;
  double require_below_baseline = 0;  // exit 1 unless validation loss <= baseline - this
  bool quiet = false;
};

std::string default_corpus() {
  if (const char* d = std::getenv("FUSOR_DATA_DIR")) return std::string(d) + "/shakespeare.txt";
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/fusor/shakespeare.txt";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/fusor/shakespeare.txt";
}

// The options, strictly parsed and range-checked (fusor/app/command_line.hpp); empty after --help.
std::optional<options> parse(int argc, char** argv) {
  namespace app = fs::app;
  options o;
  app::command_line cli("A character-level GPT trained on Shakespeare's plays, then asked to write some more.");
  cli.choice("--model", o.model, {"small", "nanogpt"}, "model size")
      .number("--steps", o.steps, "training steps in all (0: only generate)", app::between(0L, 10'000'000L))
      .number("--batch", o.batch, "windows a step", app::between<fs::index_t>(1, 4096))
      .number("--lr", o.learning_rate, "peak learning rate", app::above_up_to(0.f, 10.f))
      .number("--eval-every", o.eval_every, "validation loss (and checkpoint) every N steps", app::at_least(1L))
      .number("--eval-batches", o.eval_batches, "batches a validation", app::between(1L, 100'000L))
      .path("--checkpoint", o.checkpoint, "save there at every validation; with --resume, continue from it")
      .flag("--resume", o.resume, "continue from --checkpoint")
      .text("--prompt", o.prompt, "what generation starts from", "TEXT")
      .number("--generate", o.generate, "characters to write after training", app::between(0L, 1'000'000L))
      .number("--temperature", o.temperature, "sampling temperature", app::above_up_to(0.f, 100.f))
      .number("--top-k", o.top_k, "sample among the N likeliest (0: all)", app::between(0, int(vocabulary::size)))
      .number("--seed", o.seed, "initialisation, batches and sampling")
      .path("--data", o.data,
            "the corpus (default $FUSOR_DATA_DIR/shakespeare.txt, else ${XDG_CACHE_HOME:-~/.cache}/fusor/shakespeare.txt; "
            "scripts/fetch_shakespeare.sh fetches it)")
      .choice("--device", o.device, {"auto", "host", "cuda"},
              "auto: the GPU in the _cuda build when there is one; cuda without a GPU: \"skipped: no GPU\", exit 77")
      .number("--require-below-baseline", o.require_below_baseline,
              "exit 1 unless the last validation loss is X below the unigram baseline", app::at_least(0.0))
      .flag("--quiet", o.quiet, "no progress bar")
      .epilogue("exit status: 0 done; 1 the corpus, the checkpoint, Inf/NaN gradients, or a loss above\n"
                "--require-below-baseline; 2 the command line");
  if (!cli.parse(argc, argv)) return std::nullopt;
  if (o.resume && o.checkpoint.empty()) throw app::usage_error("--resume needs --checkpoint");
  if (o.require_below_baseline > 0 && o.steps == 0)
    throw app::usage_error("--require-below-baseline needs training steps to measure; --steps is 0");
  for (const char c : o.prompt)  // before training: a character the model cannot read is the command line's fault
    if (vocabulary::encode(static_cast<unsigned char>(c)) < 0)
      throw app::usage_error("--prompt: character " + std::to_string(int(static_cast<unsigned char>(c))) +
                             " is outside the vocabulary (printable ASCII and newline)");
  if (o.data.empty()) o.data = default_corpus();
  return o;
}

void wait([[maybe_unused]] const fs::host_executor& ex) {}
#if FUSOR_HAS_CUDA
void wait(const fs::cuda_executor& ex) { ex.synchronize(); }
#endif

using gpt_small = gpt::config<vocabulary::size, 128, 128, 4, 4>;
using gpt_nanogpt = gpt::config<vocabulary::size, 256, 384, 6, 6>;

template <class Config, class Precision, class Space, class Executor>
class run {
  using network_t = nn::network<gpt::model<Config>, Precision, Space>;
  using trainer_t = fs::optim::trainer<network_t, fs::optim::adamw>;
  using ids_host = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 2>, fs::row_major, fs::host_space>;
  using ids_space = fs::tensor<std::int32_t, fs::dextents<fs::index_t, 2>, fs::row_major, Space>;
  static constexpr fs::index_t context = Config::context;

 public:
  run(const options& o, const Executor& ex, fs::stream_t stream, const fs::data::character_corpus& corpus)
      : o_(o), ex_(ex), corpus_(corpus), net_(o.batch, {.seed = o.seed, .stream = stream}),
        trainer_(net_,
                 {.schedule = fs::optim::learning_rate_schedule::warmup_cosine(o.learning_rate, o.warmup,
                                                                               std::max(o.steps, o.warmup + 1)),
                  .clip = {.max_norm = 1.0f},
                  .stream = stream},
                 fs::optim::adamw_options{.beta2 = 0.99f, .weight_decay = o.weight_decay}),
        host_inputs_(fs::dextents<fs::index_t, 2>(o.batch, context)),
        host_targets_(fs::dextents<fs::index_t, 2>(o.batch, context)),
        inputs_(fs::dextents<fs::index_t, 2>(o.batch, context), stream),
        targets_(fs::dextents<fs::index_t, 2>(o.batch, context), stream) {
    trainer_.initialize(ex);
  }

  fs::index_t parameter_count() const { return net_.parameter_count(); }
  // Bytes a checkpoint of the training state takes (optim::save_training_state).
  std::uint64_t checkpoint_bytes() { return fs::optim::training_state_bytes(trainer_); }

  // Trains to o.steps; returns the last validation loss (NaN when none was measured).
  double train() {
    const fs::data::text_windows training(corpus_.training(), context, o_.seed);
    long first = 0;
    if (o_.resume && std::filesystem::exists(o_.checkpoint)) {
      const auto metadata = fs::optim::load_training_state(o_.checkpoint, trainer_);
      first = fs::io::metadata_number<long>(metadata, "step", o_.checkpoint);
      if (first < 0)
        throw fs::io::checkpoint_error("checkpoint '" + o_.checkpoint.string() + "': metadata 'step' is " +
                                       std::to_string(first) + ", not a number of steps");
      if (o_.steps > 0 && first > o_.steps)  // --steps 0 only generates, from any checkpoint
        throw fs::app::usage_error("checkpoint '" + o_.checkpoint.string() + "' was saved at step " +
                                   std::to_string(first) + ", beyond the --steps " + std::to_string(o_.steps) +
                                   " asked for: ask for more, or --steps 0 to only generate");
      std::printf("resumed from %s at step %ld\n", o_.checkpoint.c_str(), first);
    }
    // Resumed at the last step: nothing to train; the saved model is measured (--require-below-baseline reads it).
    double validation_loss = first > 0 && first == o_.steps ? validate() : std::nan("");
    if (!std::isnan(validation_loss)) report_validation(first, validation_loss, "");
    trainer_.loss().reset(ex_);
    auto start = std::chrono::steady_clock::now();
    long tokens_since = 0;
    for (long step = first; step < o_.steps; ++step) {
      training.fill(host_inputs_.data(), host_targets_.data(), o_.batch, std::uint64_t(step));
      fs::copy(inputs_.view(), host_inputs_.view());
      fs::copy(targets_.view(), host_targets_.view());
      trainer_.step(inputs_, targets_, ex_);
      tokens_since += o_.batch * context;
      const bool evaluate_now = (step + 1) % o_.eval_every == 0 || step + 1 == o_.steps;
      if ((!o_.quiet && (step + 1) % 10 == 0) || evaluate_now) {
        wait(ex_);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress(step + 1, trainer_.loss().totals().mean_loss, double(tokens_since) / seconds);
      }
      if (evaluate_now) {
        validation_loss = validate();
        report_validation(step + 1, validation_loss, o_.quiet ? "" : "\n");
        if (!o_.checkpoint.empty())
          fs::optim::save_training_state(o_.checkpoint, trainer_, {{"step", std::to_string(step + 1)}});
        trainer_.loss().reset(ex_);
        start = std::chrono::steady_clock::now();
        tokens_since = 0;
      }
    }
    return validation_loss;
  }

  // "step N  validation loss L  (unigram baseline B)", after `before` (a newline ends the progress bar's line).
  void report_validation(long step, double loss, const char* before) const {
    std::printf("%sstep %ld  validation loss %.4f  (unigram baseline %.4f)\n", before, step, loss,
                corpus_.unigram_baseline());
    std::fflush(stdout);
  }

  // The mean loss on o.eval_batches fixed windows of the validation text.
  double validate() {
    const fs::data::text_windows validation(corpus_.validation(), context, o_.seed ^ 0x5eed);
    trainer_.loss().reset(ex_);
    for (long b = 0; b < o_.eval_batches; ++b) {
      validation.fill(host_inputs_.data(), host_targets_.data(), o_.batch, std::uint64_t(b));
      fs::copy(inputs_.view(), host_inputs_.view());
      fs::copy(targets_.view(), host_targets_.view());
      trainer_.evaluate(inputs_, targets_, ex_);
    }
    return trainer_.loss().totals().mean_loss;
  }

  // Writes o.generate characters after the prompt, one token at a time with a
  // key/value cache (gpt_decoder.hpp): each character costs one position's work.
  void generate() {
    if (o_.generate <= 0) return;
    std::vector<std::int32_t> prompt;
    for (const char c : o_.prompt)  // parse() refused characters outside the vocabulary
      prompt.push_back(vocabulary::encode(static_cast<unsigned char>(c)));
    if (prompt.empty()) prompt.push_back(vocabulary::newline);
    std::printf("--- %ld characters from the prompt (temperature %g, top-k %d) ---\n%s", o_.generate, o_.temperature,
                o_.top_k, o_.prompt.c_str());
    std::mt19937_64 engine(fs::data::mix_bits(o_.seed ^ 0x6e6e));
    gpt::decoder<Config> decoder(net_);
    std::span<const float> logits;
    for (const std::int32_t t : prompt) logits = decoder.feed(t);
    const auto start = std::chrono::steady_clock::now();
    for (long n = 0; n < o_.generate; ++n) {
      const std::int32_t next = sample(std::vector<float>(logits.begin(), logits.end()), engine);
      std::putchar(vocabulary::decode(next));
      logits = decoder.feed(next);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("\n--- %.0f characters/s (key/value cache, host fp32) ---\n", double(o_.generate) / seconds);
  }

 private:
  void progress(long step, double loss, double tokens_per_second) const {
    if (o_.quiet) return;
    const int width = 30, filled = int(double(step) / double(std::max(o_.steps, 1L)) * width + 0.5);
    std::printf("\rstep %ld/%ld [%.*s%.*s]  loss %.4f  %.0f tokens/s   ", step, o_.steps, filled,
                "##############################", width - filled, "..............................", loss,
                tokens_per_second);
    std::fflush(stdout);
  }
  // Softmax of logits / temperature over the top-k, then one draw.
  std::int32_t sample(std::vector<float> logits, std::mt19937_64& engine) const {
    if (o_.top_k > 0 && std::size_t(o_.top_k) < logits.size()) {
      std::vector<float> sorted = logits;
      std::nth_element(sorted.begin(), sorted.begin() + (o_.top_k - 1), sorted.end(), std::greater<>());
      const float kth = sorted[std::size_t(o_.top_k - 1)];
      for (float& l : logits)
        if (l < kth) l = -INFINITY;
    }
    const float largest = *std::max_element(logits.begin(), logits.end());
    std::vector<double> weights(logits.size());
    for (std::size_t j = 0; j < logits.size(); ++j) weights[j] = std::exp(double(logits[j] - largest) / o_.temperature);
    std::discrete_distribution<std::int32_t> pick(weights.begin(), weights.end());
    return pick(engine);
  }

  const options& o_;
  Executor ex_;
  const fs::data::character_corpus& corpus_;
  network_t net_;
  trainer_t trainer_;
  ids_host host_inputs_, host_targets_;
  ids_space inputs_, targets_;
};

template <class Config, class Precision, class Space, class Executor>
int train_and_write(const options& o, const Executor& ex, fs::stream_t stream, const std::string& device) {
  const auto corpus = fs::data::character_corpus::load(o.data);
  corpus.require_windows(Config::context);
  run<Config, Precision, Space, Executor> r(o, ex, stream, corpus);
  // A save that cannot work fails now, not at the first validation.
  if (!o.checkpoint.empty()) fs::io::check_destination(o.checkpoint, fs::io::destination_kind::file, r.checkpoint_bytes());
  std::printf("fusor GPT (%s: context %zu, %zu blocks, %zu channels, %zu heads), %lld parameters, on %s\n",
              o.model.c_str(), Config::context, Config::blocks, Config::channels, Config::heads,
              (long long)r.parameter_count(), device.c_str());
  std::printf("  %s: %zu characters for training, %zu for validation; batch %lld x %zu tokens, AdamW lr %g\n",
              o.data.c_str(), corpus.training().size(), corpus.validation().size(), (long long)o.batch,
              Config::context, o.learning_rate);
  const double validation_loss = r.train();
  r.generate();
  if (o.require_below_baseline > 0) {
    const double bound = corpus.unigram_baseline() - o.require_below_baseline;
    std::printf("validation loss %.4f; required at most %.4f (unigram baseline %.4f - %g)\n", validation_loss, bound,
                corpus.unigram_baseline(), o.require_below_baseline);
    if (!(validation_loss <= bound)) return 1;
  }
  return 0;
}

template <class Precision, class Space, class Executor>
int by_model(const options& o, const Executor& ex, fs::stream_t stream, const std::string& device) {
  if (o.model == "nanogpt") return train_and_write<gpt_nanogpt, Precision, Space>(o, ex, stream, device);
  return train_and_write<gpt_small, Precision, Space>(o, ex, stream, device);
}
}  // namespace

int main(int argc, char** argv) {
  try {
    const std::optional<options> o = parse(argc, argv);
    if (!o) return 0;
#if FUSOR_HAS_CUDA
    if (o->device != "host" && fs::gpu::available()) {
      cudaStream_t stream{};
      FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cudaDeviceProp properties{};
      FUSOR_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
      const int status = by_model<fs::bf16, fs::device_space>(*o, fs::cuda_executor{stream}, stream,
                                                              std::string("GPU ") + properties.name + " (bf16)");
      FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
      return status;
    }
    if (o->device == "cuda") {  // 77: ctest's "skipped" (the _cuda example tests ask for the GPU)
      std::printf("skipped: no GPU (--device cuda, but no CUDA GPU is available)\n");
      return 77;
    }
#else
    if (o->device == "cuda")
      throw fs::app::usage_error("--device cuda, but this program was built without CUDA (use gpt_char_cuda)");
#endif
    return by_model<fs::fp32, fs::host_space>(*o, fs::host_executor{}, fs::stream_t{}, "the host (fp32)");
  } catch (const std::exception& e) {  // 2: the command line; 1: the rest (corpus, checkpoint, Inf/NaN, GPU)
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return dynamic_cast<const fs::app::usage_error*>(&e) ? 2 : 1;
  }
}
