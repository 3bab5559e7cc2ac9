// fusor/data/fashion_mnist.hpp — load_fashion_mnist: the Fashion-MNIST training or
// test set as labelled_images, read from the Debian package dataset-fashion-mnist
// (/usr/share/datasets/fashion-mnist) or any directory in MNIST's layout.
//
// The files are train-{images-idx3,labels-idx1}-ubyte.gz and t10k-..., gzipped
// or not. A missing directory or file says which package to install; images
// and labels that disagree name both files and both counts. Link fusor::data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>

#include "fusor/data/error.hpp"
#include "fusor/data/idx.hpp"
#include "fusor/data/labelled_images.hpp"

namespace fusor::data {

/// Where the Debian package dataset-fashion-mnist puts the files.
inline const std::filesystem::path fashion_mnist_default_path = "/usr/share/datasets/fashion-mnist";

/// Which set to read: the training set (train-* files) or the test set (t10k-* files).
enum class split { train, test };

namespace detail {

inline constexpr const char* fashion_mnist_install_hint =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or pass the directory that holds the files";

// `stem`.gz, or `stem` uncompressed; data_error with the install hint when neither exists.
inline std::filesystem::path find_mnist_file(const std::filesystem::path& directory, const std::string& stem) {
  std::error_code ec;
  for (const auto& name : {stem + ".gz", stem})
    if (std::filesystem::is_regular_file(directory / name, ec)) return directory / name;
  throw data_error("fusor: Fashion-MNIST file '" + (directory / (stem + ".gz")).string() +
                   "' not found (nor uncompressed); " + fashion_mnist_install_hint);
}

inline std::string shape_text(const std::vector<index_t>& shape) {
  std::string text = "[";
  for (std::size_t r = 0; r < shape.size(); ++r) text += (r ? ", " : "") + std::to_string(shape[r]);
  return text + "]";
}

}  // namespace detail

/// Reads one split. Checks: images are ubyte [count, rows, cols] with rows and
/// cols positive, labels ubyte [count] with the same count, every label in 0..9. A missing directory or
/// file, or a failed check, throws data_error naming the file.
inline labelled_images load_fashion_mnist(split which, const std::filesystem::path& directory = fashion_mnist_default_path) {
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
