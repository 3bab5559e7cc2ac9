// libFuzzer target: data::load_fashion_mnist over a fuzzed pair of files (the
// first two bytes say where the images file ends and the labels file starts),
// both gzipped as the data set ships them when the third byte is odd. Any
// bytes either load or throw fusor::data_error; what loads is consistent:
// as many labels as images, every label 0 to 9.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include <fusor/data/fashion_mnist.hpp>

#include "fuzz_support.hpp"
#include "gzip_bytes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::size_t split = std::min<std::size_t>((std::size_t(data[0]) << 8 | data[1]), size - 3);
  const bool gzipped = data[2] & 1;
  const std::span<const std::uint8_t> images(data + 3, split), labels(data + 3 + split, size - 3 - split);
  const auto dir = fuzz::scratch() / "fashion-mnist";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto put = [&](const char* stem, std::span<const std::uint8_t> bytes) {
    if (gzipped) fuzz::write(dir / (std::string(stem) + ".gz"), fuzz::gzip(bytes));
    else fuzz::write(dir / stem, bytes);
  };
  put("train-images-idx3-ubyte", images);
  put("train-labels-idx1-ubyte", labels);
  try {
    const fusor::data::labelled_images set = fusor::data::load_fashion_mnist(fusor::data::split::train, dir);
    fuzz::require(set.labels.size() == std::size_t(set.count));
    fuzz::require(set.pixels.size() == std::size_t(set.count * set.rows * set.cols));
    for (const auto label : set.labels) fuzz::require(label >= 0 && label < 10);
  } catch (const fusor::data_error&) {
  }
  return 0;
}
