// tests/fuzz/fuzz_support.hpp — what the libFuzzer targets share: a private
// scratch folder for the files a target writes (the readers under test read
// paths), and the rule every target enforces: bad bytes may only raise the
// library's own documented exception; anything else escapes and libFuzzer
// reports it as a crash, with the input saved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <unistd.h>

namespace fuzz {

// One folder per fuzzing process, made at the first call, removed at exit.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "fusor-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    static const std::filesystem::path made = pattern;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(made, ec);
    });
    return made;
  }();
  return dir;
}

inline void write(const std::filesystem::path& file, std::span<const std::uint8_t> bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) std::abort();
}

// A check of the fuzzed code's own promises (a round trip): a failure is a finding.
inline void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace fuzz
