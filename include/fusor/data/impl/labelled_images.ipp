// fusor/data/impl/labelled_images.ipp — definitions of fusor/data/labelled_images.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/data/labelled_images.hpp"

#include <cstddef>
#include <string>

namespace fusor::data {

FUSOR_DECL void validate(const labelled_images& data) {
  const auto fail = [](const std::string& what) { throw data_error("fusor: labelled_images: " + what); };
  if (data.count < 0 || data.rows < 0 || data.cols < 0)
    fail("negative size: count " + std::to_string(data.count) + ", rows " + std::to_string(data.rows) + ", cols " +
         std::to_string(data.cols));
  if (data.classes <= 0) fail("classes is " + std::to_string(data.classes) + ", must be positive");
  index_t image = 0, pixels = 0;  // sizes past index_t would wrap (to 0, say) and pass the check below
  if (__builtin_mul_overflow(data.rows, data.cols, &image) || __builtin_mul_overflow(data.count, image, &pixels))
    fail("count * rows * cols = " + std::to_string(data.count) + " * " + std::to_string(data.rows) + " * " +
         std::to_string(data.cols) + " overflows a 64-bit index");
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

FUSOR_DECL labelled_images take_first(const labelled_images& data, index_t count) {
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
