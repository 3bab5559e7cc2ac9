// data::character_corpus and data::text_windows (examples/gpt_char's data):
// the fixed ASCII vocabulary round-trips, a byte outside it is an error naming
// the source and the offset, the split keeps the text's order, the unigram
// baseline is the smoothed frequencies' cross-entropy, and a window's targets
// are its inputs shifted by one, drawn as a function of (seed, step) alone.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fusor/data/character_corpus.hpp>

#include "data/data_support.hpp"

using namespace data_test;
using fusor::data::ascii_vocabulary;
using fusor::data::character_corpus;
using fusor::data::text_windows;

TEST_CASE("the ASCII vocabulary: 96 tokens, printable characters and the newline, round trip") {
  std::set<std::int32_t> seen;
  for (int c = 0; c < 256; ++c) {
    const std::int32_t t = ascii_vocabulary::encode(static_cast<unsigned char>(c));
    const bool inside = c == '\n' || (c >= 32 && c <= 126);
    CHECK((t >= 0) == inside);
    if (t < 0) continue;
    CHECK(t < std::int32_t(ascii_vocabulary::size));
    CHECK(ascii_vocabulary::decode(t) == char(c));
    seen.insert(t);
  }
  CHECK(seen.size() == ascii_vocabulary::size);
}

TEST_CASE("character_corpus: tokens, split, carriage returns, and bad bytes named") {
  const character_corpus c("To be,\r\nor not!\n0123456789", "text", 0.25);
  const std::string plain = "To be,\nor not!\n0123456789";
  REQUIRE(c.tokens().size() == plain.size());
  for (std::size_t i = 0; i != plain.size(); ++i) CHECK(ascii_vocabulary::decode(c.tokens()[i]) == plain[i]);
  CHECK(c.training().size() + c.validation().size() == plain.size());
  CHECK(c.validation().size() == std::size_t(double(plain.size()) * 0.25));
  CHECK(c.validation().data() == c.training().data() + c.training().size());

  try {
    character_corpus("abc\tdef", "play.txt");
    FAIL("a tab was accepted");
  } catch (const fusor::data_error& e) {
    const std::string m = e.what();
    CHECK(m.find("play.txt") != std::string::npos);
    CHECK(m.find("byte 9 at offset 3") != std::string::npos);
  }
  CHECK_THROWS_AS(character_corpus("abc", "x", 0.0), fusor::data_error);
  try {
    character_corpus::load("/nonexistent/shakespeare.txt");
    FAIL("a missing file loaded");
  } catch (const fusor::data_error& e) {
    CHECK(std::string(e.what()).find("scripts/fetch_shakespeare.sh") != std::string::npos);
  }
  // A folder opens as a stream on Linux, and its first read fails: named as a folder instead.
  const std::string folder = std::filesystem::temp_directory_path().string();
  expect_error<fusor::data_error>([&] { character_corpus::load(folder); }, {folder.c_str(), "is a folder"});
}

TEST_CASE("character_corpus: the unigram baseline is the add-one frequencies' cross-entropy") {
  std::string text(900, 'a');
  for (int i = 0; i < 90; ++i) text[std::size_t(i) * 10] = 'b';
  text += std::string(50, 'a') + std::string(50, 'c');  // validation: 100 characters
  const character_corpus c(text, "t", 0.1);
  REQUIRE(c.validation().size() == 100);
  // Training: 810 'a', 90 'b'; add-one over 96 tokens.
  const double total = 900 + 96;
  const double want = -(50 * std::log(811 / total) + 50 * std::log(1 / total)) / 100;
  CHECK(std::abs(c.unigram_baseline() - want) < 1e-12);
}

TEST_CASE("text_windows: targets are the next tokens; a batch is a function of (seed, step)") {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += char('a' + (i * 7 + i / 26) % 26);
  const character_corpus c(text, "t");
  const index_t context = 12, batch = 6;
  const text_windows w(c.training(), context, 3);
  std::vector<std::int32_t> in(batch * context, -1), out(batch * context, -1), in2(in), out2(out), in3(in), out3(out);
  w.fill(in.data(), out.data(), batch, 7);
  w.fill(in2.data(), out2.data(), batch, 7);
  text_windows(c.training(), context, 3).fill(in3.data(), out3.data(), batch, 8);
  CHECK(in == in2);
  CHECK(out == out2);
  CHECK(in3 != in);
  for (index_t b = 0; b < batch; ++b) {
    // The window is a piece of the training text, and targets follow inputs.
    const auto* first = &in[std::size_t(b * context)];
    bool found = false;
    for (std::size_t s = 0; s + std::size_t(context) < c.training().size() && !found; ++s)
      found = std::equal(first, first + context, c.training().begin() + std::ptrdiff_t(s)) &&
              c.training()[s + std::size_t(context)] == out[std::size_t(b * context + context - 1)];
    CHECK(found);
    for (index_t t = 0; t + 1 < context; ++t)
      CHECK(out[std::size_t(b * context + t)] == in[std::size_t(b * context + t + 1)]);
  }
  CHECK_THROWS_AS(text_windows(c.training().first(12), 12, 1), fusor::data_error);
}

TEST_CASE("character_corpus: a text too short for a window names itself and the part that is short") {
  // 40 characters, the last 4 (10%) for validation: a window of 3 + 1 fits both parts, 4 + 1 not the validation.
  const character_corpus c(std::string(40, 'a'), "tiny.txt");
  REQUIRE(c.validation().size() == 4);
  c.require_windows(3);
  try {
    c.require_windows(4);
    FAIL("a validation part of 4 tokens held a window of 4 + 1");
  } catch (const fusor::data_error& e) {
    CHECK(std::string(e.what()).find("tiny.txt: its validation part holds 4 tokens (of 40), fewer than a window of 4 "
                                     "+ 1") != std::string::npos);
  }
  try {
    c.require_windows(36);
    FAIL("a training part of 36 tokens held a window of 36 + 1");
  } catch (const fusor::data_error& e) {
    CHECK(std::string(e.what()).find("its training part holds 36 tokens") != std::string::npos);
  }
}
