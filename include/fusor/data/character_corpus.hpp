// fusor/data/character_corpus.hpp — text as a stream of character tokens, for
// a character-level language model (examples/gpt_char), and the random
// windows of it that make its training batches.
//
//   auto corpus = data::character_corpus::load("shakespeare.txt");
//   data::text_windows train(corpus.training(), /*context=*/128, /*seed=*/1);
//   train.fill(inputs, targets, /*batch=*/32, /*step=*/s);   // [32, 128] ids, and each one's next
//
// The vocabulary is fixed (data::ascii_vocabulary: printable ASCII and the
// newline, 96 tokens), because a network's vocabulary is a compile-time
// extent; a byte outside it is an error naming the file and the offset.
// A batch is a function of (seed, step) alone, so a run resumed at step s
// draws what the uninterrupted run drew: no sampler state to save.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/data/error.hpp"
#include "fusor/data/permutation.hpp"

namespace fusor::data {

/// The character model's vocabulary: space .. '~' are tokens 0..94, the newline 95.
struct ascii_vocabulary {
  static constexpr std::size_t size = 96;  ///< The number of tokens.
  static constexpr std::int32_t newline = 95;  ///< The newline's token.
  /// The token of a byte, or -1 where the vocabulary has none.
  static constexpr std::int32_t encode(unsigned char c) {
    if (c == '\n') return newline;
    if (c >= 0x20 && c <= 0x7e) return std::int32_t(c) - 0x20;
    return -1;
  }
  /// The character of token `token` (one of 0..95).
  static constexpr char decode(std::int32_t token) { return token == newline ? '\n' : char(token + 0x20); }
};

/// A text as character tokens (ascii_vocabulary), split into a training part and a validation part.
class character_corpus {
 public:
  /// The text's tokens; `source` names it in errors. A carriage return is dropped (Windows
  /// line ends); any other byte outside the vocabulary is a data_error, as is a `validation_fraction`
  /// outside (0, 1).
  character_corpus(const std::string& text, const std::string& source, double validation_fraction = 0.1);
  /// The text of a file: a missing or unreadable file names the file and how to get the corpus.
  static character_corpus load(const std::string& path, double validation_fraction = 0.1);

  /// Every token of the text.
  std::span<const std::int32_t> tokens() const { return tokens_; }
  /// The first 1 - validation_fraction of the text.
  std::span<const std::int32_t> training() const { return std::span(tokens_).first(split_); }
  /// The rest of the text, after training().
  std::span<const std::int32_t> validation() const { return std::span(tokens_).subspan(split_); }

  /// The cross-entropy (nats per character) on the validation text of the
  /// training text's character frequencies (add-one smoothed): what a model
  /// that ignores context reaches; a language model must get clearly below it.
  double unigram_baseline() const;

  /// Throws data_error, naming the text and the part, unless the training part and the validation part each
  /// hold a window of `context` + 1 tokens (what text_windows needs): checked before training starts.
  void require_windows(index_t context) const;

 private:
  std::vector<std::int32_t> tokens_;
  std::size_t split_ = 0;
  std::string source_;  // names the text in errors
};

/// Random windows of `context` + 1 tokens: inputs are the first `context`,
/// targets the last `context` (each input's next token), as nanoGPT's get_batch.
class text_windows {
 public:
  /// Windows of `tokens` (kept by reference: they must outlive this), drawn by `seed`. Throws data_error
  /// when the text is shorter than one window.
  text_windows(std::span<const std::int32_t> tokens, index_t context, std::uint64_t seed);
  /// inputs and targets: `batch` x context int32 each (host memory), the
  /// windows of step `step` (the same for the same seed and step, anywhere).
  void fill(std::int32_t* inputs, std::int32_t* targets, index_t batch, std::uint64_t step) const;
  /// The number of tokens a window feeds the model.
  index_t context() const { return context_; }

 private:
  std::span<const std::int32_t> tokens_;
  index_t context_;
  std::uint64_t seed_;
};

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/character_corpus.ipp"
#endif
