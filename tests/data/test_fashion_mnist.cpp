// load_fashion_mnist: the real training and test sets from the Debian package
// dataset-fashion-mnist (sizes and per-class counts are published facts of the
// data set); MNIST-layout directories written here, gzipped and raw; every
// error: a missing directory or file (naming the package), images and labels
// that disagree (both files, both counts), wrong types and shapes, labels out
// of range. labelled_images: validate() and take_first().
#include <array>
#include <cmath>
#include <utility>
#include <string>

#include <fusor/data/fashion_mnist.hpp>

#include "data/data_support.hpp"

using namespace data_test;
using fusor::data::labelled_images;
using fusor::data::load_fashion_mnist;
using fusor::data::split;

namespace {

// Checks the sizes and that every class appears `per_class` times.
void check_real_split(const labelled_images& data, index_t count, index_t per_class) {
  CHECK(data.count == count);
  CHECK(data.rows == 28);
  CHECK(data.cols == 28);
  CHECK(data.classes == 10);
  CHECK(index_t(data.pixels.size()) == count * 28 * 28);
  REQUIRE(index_t(data.labels.size()) == count);
  std::array<index_t, 10> seen{};
  for (const std::int32_t label : data.labels) {
    REQUIRE(label >= 0);
    REQUIRE(label < 10);
    ++seen[std::size_t(label)];
  }
  for (std::size_t c = 0; c < 10; ++c) CHECK_MESSAGE(seen[c] == per_class, "class ", c);
  // Images, not noise or zeros: both ends of the pixel range occur.
  std::array<index_t, 256> histogram{};
  for (const std::uint8_t p : data.pixels) ++histogram[p];
  CHECK(histogram[0] > 0);
  CHECK(histogram[255] > 0);
}

// Mean and standard deviation of all pixels / 255, in double.
std::pair<double, double> pixel_statistics(const labelled_images& data) {
  double sum = 0, sum_of_squares = 0;
  for (const std::uint8_t p : data.pixels) sum += p / 255.0, sum_of_squares += (p / 255.0) * (p / 255.0);
  const double n = double(data.pixels.size()), mean = sum / n;
  return {mean, std::sqrt(sum_of_squares / n - mean * mean)};
}

// Writes an MNIST-layout split into `dir`: `count` random images and labels.
void write_split(const fs::path& dir, const std::string& prefix, std::uint32_t count, std::uint32_t label_count,
                 const bytes& pixels, const bytes& labels, bool gzip) {
  const bytes images_file = idx_file(0x08, {count, 4, 3}, pixels, 1);
  const bytes labels_file = idx_file(0x08, {label_count}, labels, 1);
  if (gzip) {
    write_gzip(dir / (prefix + "-images-idx3-ubyte.gz"), images_file);
    write_gzip(dir / (prefix + "-labels-idx1-ubyte.gz"), labels_file);
  } else {
    write_raw(dir / (prefix + "-images-idx3-ubyte"), images_file);
    write_raw(dir / (prefix + "-labels-idx1-ubyte"), labels_file);
  }
}

bytes random_labels(std::size_t n, std::uint32_t seed) {
  bytes labels = random_bytes(n, seed);
  for (auto& l : labels) l %= 10;
  return labels;
}

}  // namespace

TEST_CASE("Fashion-MNIST from the Debian package: 60000 + 10000 images of 28 x 28, each class 6000 / 1000 times") {
  REQUIRE(fusor::data::fashion_mnist_default_path == "/usr/share/datasets/fashion-mnist");
  const auto train = load_fashion_mnist(split::train);
  check_real_split(train, 60000, 6000);
  // The normalisation constants everyone quotes for the training set: 0.2860, 0.3530.
  const auto [mean, deviation] = pixel_statistics(train);
  CHECK(std::fabs(mean - 0.2860) < 1e-4);  // quoted to four places: within 5e-5, and a margin
  CHECK(std::fabs(deviation - 0.3530) < 1e-4);
  check_real_split(load_fashion_mnist(split::test, fusor::data::fashion_mnist_default_path), 10000, 1000);
}

TEST_CASE("load_fashion_mnist reads any MNIST-layout directory, gzipped or raw") {
  for (const bool gzip : {true, false}) {
    scratch_directory dir;
    const bytes train_pixels = random_bytes(9 * 12, 21), test_pixels = random_bytes(5 * 12, 22);
    const bytes train_labels = random_labels(9, 23), test_labels = random_labels(5, 24);
    write_split(dir.path(), "train", 9, 9, train_pixels, train_labels, gzip);
    write_split(dir.path(), "t10k", 5, 5, test_pixels, test_labels, gzip);
    for (const auto which : {split::train, split::test}) {
      const auto data = load_fashion_mnist(which, dir.path());
      const bool train = which == split::train;
      CHECK(data.count == (train ? 9 : 5));
      CHECK(data.rows == 4);
      CHECK(data.cols == 3);
      CHECK(data.pixels == (train ? train_pixels : test_pixels));
      const bytes& labels = train ? train_labels : test_labels;
      REQUIRE(data.labels.size() == labels.size());
      for (std::size_t i = 0; i < labels.size(); ++i) CHECK(data.labels[i] == labels[i]);
    }
  }
}

TEST_CASE("load_fashion_mnist: a missing directory or file says which package to install") {
  scratch_directory dir;
  const auto missing = dir / "nowhere";
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::train, missing); },
                                  {missing.c_str(), "apt-get install dataset-fashion-mnist", "pass the directory"});
  // The directory is there, the test set is not.
  write_split(dir.path(), "train", 2, 2, random_bytes(24, 1), random_labels(2, 2), true);
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::test, dir.path()); },
                                  {(dir / "t10k-images-idx3-ubyte.gz").c_str(), "not found", "dataset-fashion-mnist"});
}

TEST_CASE("load_fashion_mnist: image and label counts that disagree name both files and both counts") {
  scratch_directory dir;
  write_split(dir.path(), "train", 7, 6, random_bytes(7 * 12, 3), random_labels(6, 4), true);
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::train, dir.path()); },
                                  {(dir / "train-images-idx3-ubyte.gz").c_str(), "7 images",
                                   (dir / "train-labels-idx1-ubyte.gz").c_str(), "6 labels"});
}

TEST_CASE("load_fashion_mnist: wrong types, shapes and labels out of range are named") {
  scratch_directory dir;
  const auto images = dir / "train-images-idx3-ubyte.gz";
  const auto labels = dir / "train-labels-idx1-ubyte.gz";
  // Images of rank 2.
  write_gzip(images, idx_file(0x08, {3, 12}, random_bytes(36, 5), 1));
  write_gzip(labels, idx_file(0x08, {3}, random_labels(3, 6), 1));
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::train, dir.path()); },
                                  {images.c_str(), "shape [3, 12]", "[count, rows, cols]"});
  // Labels stored as int.
  write_gzip(images, idx_file(0x08, {3, 4, 3}, random_bytes(36, 5), 1));
  write_gzip(labels, idx_file(0x0C, {3}, random_bytes(12, 6), 4));
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::train, dir.path()); },
                                  {labels.c_str(), "int data", "ubyte of shape [count]"});
  // Images with no columns.
  write_gzip(images, idx_file(0x08, {3, 4, 0}, {}, 1));
  write_gzip(labels, idx_file(0x08, {3}, random_labels(3, 6), 1));
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::train, dir.path()); },
                                  {images.c_str(), "4 x 0 pixels"});
  // A label of 10.
  bytes bad = random_labels(3, 6);
  bad[1] = 10;
  write_gzip(images, idx_file(0x08, {3, 4, 3}, random_bytes(36, 5), 1));
  write_gzip(labels, idx_file(0x08, {3}, bad, 1));
  expect_error<fusor::data_error>([&] { load_fashion_mnist(split::train, dir.path()); },
                                  {labels.c_str(), "label 10 at position 1", "outside 0..9"});
}

TEST_CASE("take_first copies the first samples; validate names what disagrees") {
  const labelled_images data = random_images(50, 3, 4, 31);
  const labelled_images part = take_first(data, 20);
  CHECK(part.count == 20);
  CHECK(part.rows == 3);
  CHECK(part.cols == 4);
  CHECK(part.classes == data.classes);
  CHECK(part.pixels == std::vector<std::uint8_t>(data.pixels.begin(), data.pixels.begin() + 20 * 12));
  CHECK(part.labels == std::vector<std::int32_t>(data.labels.begin(), data.labels.begin() + 20));
  CHECK(take_first(data, 0).pixels.empty());
  CHECK(take_first(data, 50).pixels == data.pixels);
  expect_error<fusor::data_error>([&] { take_first(data, 51); }, {"take_first(51)", "50 samples"});

  CHECK_NOTHROW(validate(data));
  labelled_images wrong = data;
  wrong.pixels.pop_back();
  expect_error<fusor::data_error>([&] { validate(wrong); }, {"599", "50 * 3 * 4 = 600"});
  wrong = data;
  wrong.labels.push_back(1);
  expect_error<fusor::data_error>([&] { validate(wrong); }, {"labels holds 51", "count is 50"});
  wrong = data;
  wrong.labels[7] = -1;
  expect_error<fusor::data_error>([&] { validate(wrong); }, {"label -1 of sample 7", "[0, 10)"});
  expect_error<fusor::data_error>([&] { take_first(wrong, 3); }, {"label -1 of sample 7"});
  // Sizes whose product wraps past 2^63 (to 0 here: no pixels) are refused, not taken for an empty image set.
  labelled_images huge;
  huge.count = 4, huge.rows = index_t(1) << 62, huge.cols = 1;
  huge.labels.assign(4, 0);
  expect_error<fusor::data_error>([&] { validate(huge); }, {"4 * 4611686018427387904 * 1", "overflows"});
}
