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
inline void validate(const labelled_images& data) {
  const auto fail = [](const std::string& what) { throw data_error("fusor: labelled_images: " + what); };
  if (data.count < 0 || data.rows < 0 || data.cols < 0)
    fail("negative size: count " + std::to_string(data.count) + ", rows " + std::to_string(data.rows) + ", cols " +
         std::to_string(data.cols));
  if (data.classes <= 0) fail("classes is " + std::to_string(data.classes) + ", must be positive");
  const index_t pixels = data.count * data.rows * data.cols;
  if (index_t(data.pixels.size()) != pixels)
    fail("pixels holds " + std::to_string(data.pixels.size()) + " values, count * rows * cols = " +
         std::to_string(data.count) + " * " + std::to_string(data.rows) + " * " + std::to_string(data.cols) + " = " +
         std::to_string(pixels));
  if (index_t(data.labels.size()) != data.count)
    fail("labels holds " + std::to_string(data.labels.size()) + " values, count is " + std::to_string(data.count));
  for (std::size_t i = 0; i < data.labels.size(); ++i)
    if (data.labels[i] < 0 || data.labels[i] >= data.classes)
      fail("label " + std::to_string(data.labels[i]) + " of sample " + std::to_string(i) + " is outside [0, " +
           std::to_string(data.classes) + ")");
}

/// The first `count` samples (a copy): small runs and tests. Throws data_error
/// when `count` is negative or more than the data holds, or `data` is not valid.
inline labelled_images take_first(const labelled_images& data, index_t count) {
  validate(data);
  if (count < 0 || count > data.count)
    throw data_error("fusor: take_first(" + std::to_string(count) + ") of a data set of " +
                     std::to_string(data.count) + " samples");
  labelled_images part;
  part.count = count, part.rows = data.rows, part.cols = data.cols, part.classes = data.classes;
  part.pixels.assign(data.pixels.begin(), data.pixels.begin() + std::ptrdiff_t(count * data.rows * data.cols));
  part.labels.assign(data.labels.begin(), data.labels.begin() + std::ptrdiff_t(count));
  return part;
}

}  // namespace fusor::data
