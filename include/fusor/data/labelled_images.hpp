// fusor/data/labelled_images.hpp — labelled_images: a classification data set in
// host memory (uint8 pixels as stored in the file, int32 labels), what the
// Fashion-MNIST reader returns and the loader reads; validate() and take_first().
//
// Kept apart from the file readers so that a loader over data made in memory
// needs neither zlib nor a file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/data/error.hpp"

namespace fusor::data {

/// A classification data set in host memory: uint8 pixels as the file stores them, int32 labels.
struct labelled_images {
  std::vector<std::uint8_t> pixels;  ///< count * rows * cols, sample by sample, row-major
  std::vector<std::int32_t> labels;  ///< count, each in [0, classes)
  /// The number of samples.
  index_t count = 0, rows = 0, cols = 0;  ///< Columns of each image.
  /// \var rows
  /// Rows of each image.
  std::int32_t classes = 10;  ///< The number of classes.
};

/// Throws data_error (saying which rule and the numbers) unless the sizes agree
/// and every label lies in [0, classes).
FUSOR_DECL void validate(const labelled_images& data);

/// The first `count` samples (a copy): small runs and tests. Throws data_error
/// when `count` is negative or more than the data holds, or `data` is not valid.
FUSOR_DECL labelled_images take_first(const labelled_images& data, index_t count);

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/labelled_images.ipp"
#endif
