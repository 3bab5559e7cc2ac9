// tests/data/data_support.hpp — what the input-pipeline tests share: a scratch
// directory removed afterwards, IDX files written byte by byte (raw or gzipped
// with zlib, so each error case can be made by editing the bytes), random
// labelled_images whose first pixels spell each sample's index, and a watchdog
// that turns a hang into a failure.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

#include <fusor/data/labelled_images.hpp>

#include "support/fusor_test.hpp"

namespace data_test {

using namespace fusor_test;
namespace fs = std::filesystem;
using bytes = std::vector<std::uint8_t>;

// A fresh directory under the system's temporary directory, removed with everything in it.
class scratch_directory {
 public:
  scratch_directory() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("fusor_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  scratch_directory(const scratch_directory&) = delete;
  scratch_directory& operator=(const scratch_directory&) = delete;
  ~scratch_directory() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// A whole IDX file: magic, big-endian sizes, then `elements` (host order, each
// `element_size` bytes) turned big-endian.
inline bytes idx_file(std::uint8_t type_code, const std::vector<std::uint32_t>& shape, const bytes& elements,
                      std::size_t element_size) {
  bytes file = {0, 0, type_code, std::uint8_t(shape.size())};
  for (const std::uint32_t extent : shape)
    for (int shift = 24; shift >= 0; shift -= 8) file.push_back(std::uint8_t(extent >> shift));
  for (std::size_t i = 0; i + element_size <= elements.size(); i += element_size)
    for (std::size_t b = element_size; b-- > 0;) file.push_back(elements[i + b]);  // little-endian host
  return file;
}

inline void write_raw(const fs::path& path, const bytes& content) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(content.data()), std::streamsize(content.size()));
  REQUIRE(out.good());
}

inline void write_gzip(const fs::path& path, const bytes& content) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  if (!content.empty()) REQUIRE(gzwrite(file, content.data(), unsigned(content.size())) == int(content.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

inline bytes read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline bytes random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  bytes out(n);
  for (auto& b : out) b = std::uint8_t(rng() >> 24);
  return out;
}

// Random images and labels; the first two pixels of sample i hold i in base
// 256, so a test can tell which sample a batch row came from (count <= 65536).
inline fusor::data::labelled_images random_images(index_t count, index_t rows, index_t cols, std::uint32_t seed,
                                                 std::int32_t classes = 10) {
  REQUIRE(rows * cols >= 2);
  fusor::data::labelled_images data;
  data.count = count, data.rows = rows, data.cols = cols, data.classes = classes;
  data.pixels = random_bytes(std::size_t(count * rows * cols), seed);
  std::mt19937 rng(seed + 1);
  for (index_t i = 0; i < count; ++i) {
    data.pixels[std::size_t(i * rows * cols)] = std::uint8_t(i >> 8);
    data.pixels[std::size_t(i * rows * cols + 1)] = std::uint8_t(i & 0xFF);
    data.labels.push_back(std::int32_t(rng() % std::uint32_t(classes)));
  }
  return data;
}

// Runs `action` on another thread; a hang becomes a reported failure and an exit
// (a hung test would otherwise stop the whole suite without a word).
template <class Action>
void finishes_within(std::chrono::seconds limit, const char* what, Action&& action) {
  auto done = std::async(std::launch::async, std::forward<Action>(action));
  if (done.wait_for(limit) == std::future_status::timeout) {
    std::fprintf(stderr, "FAILED: %s did not finish within %lld s (a hang)\n", what, (long long)limit.count());
    std::fflush(stderr);
    std::_Exit(1);
  }
  done.get();  // rethrows what the action threw
}

}  // namespace data_test
