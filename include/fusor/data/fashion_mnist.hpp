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

#include "fusor/config.hpp"
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
FUSOR_DECL std::filesystem::path find_mnist_file(const std::filesystem::path& directory, const std::string& stem);

FUSOR_DECL std::string shape_text(const std::vector<index_t>& shape);

}  // namespace detail

/// Reads one split. Checks: images are ubyte [count, rows, cols] with rows and
/// cols positive, labels ubyte [count] with the same count, every label in 0..9. A missing directory or
/// file, or a failed check, throws data_error naming the file.
FUSOR_DECL labelled_images load_fashion_mnist(split which,
                                              const std::filesystem::path& directory = fashion_mnist_default_path);

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/fashion_mnist.ipp"
#endif
