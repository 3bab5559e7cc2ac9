// fusor/data/impl/fashion_mnist.ipp — definitions of fusor/data/fashion_mnist.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/data/fashion_mnist.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace fusor::data {

namespace detail {

FUSOR_DECL std::filesystem::path find_mnist_file(const std::filesystem::path& directory, const std::string& stem) {
  std::error_code ec;
  for (const auto& name : {stem + ".gz", stem})
    if (std::filesystem::is_regular_file(directory / name, ec)) return directory / name;
  throw data_error("fusor: Fashion-MNIST file '" + (directory / (stem + ".gz")).string() +
                   "' not found (nor uncompressed); " + fashion_mnist_install_hint);
}

FUSOR_DECL std::string shape_text(const std::vector<index_t>& shape) {
  std::string text = "[";
  for (std::size_t r = 0; r < shape.size(); ++r) text += (r ? ", " : "") + std::to_string(shape[r]);
  return text + "]";
}

}  // namespace detail

FUSOR_DECL labelled_images load_fashion_mnist(split which, const std::filesystem::path& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    throw data_error("fusor: Fashion-MNIST directory '" + directory.string() + "' not found; " +
                     detail::fashion_mnist_install_hint);
  const std::string prefix = which == split::train ? "train" : "t10k";
  const auto images_file = detail::find_mnist_file(directory, prefix + "-images-idx3-ubyte");
  const auto labels_file = detail::find_mnist_file(directory, prefix + "-labels-idx1-ubyte");
  idx_array images = read_idx(images_file);
  const idx_array labels = read_idx(labels_file);

  const auto fail = [](const std::filesystem::path& file, const std::string& what) {
    throw data_error("fusor: Fashion-MNIST file '" + file.string() + "' " + what);
  };
  if (images.type_code != 0x08 || images.shape.size() != 3)
    fail(images_file, std::string("holds ") + idx_type_name(images.type_code) + " data of shape " +
                          detail::shape_text(images.shape) + "; images must be ubyte of shape [count, rows, cols]");
  if (labels.type_code != 0x08 || labels.shape.size() != 1)
    fail(labels_file, std::string("holds ") + idx_type_name(labels.type_code) + " data of shape " +
                          detail::shape_text(labels.shape) + "; labels must be ubyte of shape [count]");
  if (images.shape[0] != labels.shape[0])
    throw data_error("fusor: Fashion-MNIST files disagree: '" + images_file.string() + "' holds " +
                     std::to_string(images.shape[0]) + " images, '" + labels_file.string() + "' holds " +
                     std::to_string(labels.shape[0]) + " labels");
  if (images.shape[1] <= 0 || images.shape[2] <= 0)
    fail(images_file, "holds images of " + std::to_string(images.shape[1]) + " x " + std::to_string(images.shape[2]) +
                          " pixels; rows and cols must be positive");

  labelled_images result;
  result.count = images.shape[0], result.rows = images.shape[1], result.cols = images.shape[2];
  result.pixels = std::move(images.bytes);
  result.labels.resize(labels.bytes.size());
  for (std::size_t i = 0; i < labels.bytes.size(); ++i) {
    if (labels.bytes[i] >= result.classes)
      fail(labels_file, "holds label " + std::to_string(labels.bytes[i]) + " at position " + std::to_string(i) +
                            ", outside 0.." + std::to_string(result.classes - 1));
    result.labels[i] = labels.bytes[i];
  }
  return result;
}

}  // namespace fusor::data
