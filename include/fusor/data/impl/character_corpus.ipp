// fusor/data/impl/character_corpus.ipp — definitions of fusor/data/character_corpus.hpp's non-template functions
// (see FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/data/character_corpus.hpp"
#include "fusor/data/epoch_engine.hpp"

#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace fusor::data {

FUSOR_DECL character_corpus::character_corpus(const std::string& text, const std::string& source,
                                              double validation_fraction)
    : source_(source) {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0))
    throw data_error("fusor::data::character_corpus: validation fraction " + std::to_string(validation_fraction) +
                     " is not in (0, 1)");
  tokens_.reserve(text.size());
  for (std::size_t i = 0; i != text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\r') continue;
    const std::int32_t token = ascii_vocabulary::encode(byte);
    if (token < 0)
      throw data_error("fusor::data::character_corpus: " + source + ": byte " + std::to_string(int(byte)) +
                       " at offset " + std::to_string(i) +
                       " is not printable ASCII or a newline (the vocabulary of a character model)");
    tokens_.push_back(token);
  }
  split_ = tokens_.size() - static_cast<std::size_t>(double(tokens_.size()) * validation_fraction);
}

FUSOR_DECL character_corpus character_corpus::load(const std::string& path, double validation_fraction) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw data_error("fusor::data::character_corpus: " + path + " is a folder; give the text file's path");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw data_error("fusor::data::character_corpus: cannot open " + path +
                     " (the Shakespeare corpus is made by `bash scripts/fetch_shakespeare.sh`)");
  std::string text;
  try {  // libstdc++'s file buffer throws for a read the system refuses
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    throw data_error("fusor::data::character_corpus: reading " + path + " failed: " + e.what());
  }
  if (in.bad()) throw data_error("fusor::data::character_corpus: reading " + path + " failed");
  return character_corpus(text, path, validation_fraction);
}

FUSOR_DECL double character_corpus::unigram_baseline() const {
  std::vector<double> counts(ascii_vocabulary::size, 1.0);
  for (const std::int32_t t : training()) counts[std::size_t(t)] += 1.0;
  const double total = double(training().size()) + double(ascii_vocabulary::size);
  double loss = 0;
  for (const std::int32_t t : validation()) loss -= std::log(counts[std::size_t(t)] / total);
  return validation().empty() ? 0.0 : loss / double(validation().size());
}

FUSOR_DECL void character_corpus::require_windows(index_t context) const {
  const auto check = [&](std::span<const std::int32_t> part, const char* name) {
    if (index_t(part.size()) < context + 1)
      throw data_error("fusor::data::character_corpus: " + source_ + ": its " + name + " part holds " +
                       std::to_string(part.size()) + " tokens (of " + std::to_string(tokens_.size()) +
                       "), fewer than a window of " + std::to_string(context) + " + 1: give a longer text");
  };
  check(training(), "training");
  check(validation(), "validation");
}

FUSOR_DECL text_windows::text_windows(std::span<const std::int32_t> tokens, index_t context, std::uint64_t seed)
    : tokens_(tokens), context_(context), seed_(seed) {
  if (context < 1 || index_t(tokens.size()) < context + 1)
    throw data_error("fusor::data::text_windows: a text of " + std::to_string(tokens.size()) +
                     " tokens has no window of " + std::to_string(context) + " + 1 tokens");
}

FUSOR_DECL void text_windows::fill(std::int32_t* inputs, std::int32_t* targets, index_t batch,
                                   std::uint64_t step) const {
  std::mt19937_64 engine = epoch_engine(seed_, step);
  const std::uint64_t starts = tokens_.size() - std::size_t(context_);
  for (index_t b = 0; b < batch; ++b) {
    const std::size_t start = std::size_t(uniform_below(engine, starts));
    for (index_t t = 0; t < context_; ++t) {
      inputs[b * context_ + t] = tokens_[start + std::size_t(t)];
      targets[b * context_ + t] = tokens_[start + std::size_t(t) + 1];
    }
  }
}

}  // namespace fusor::data
