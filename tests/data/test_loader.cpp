// loader<host_space>: the same batches for the same (seed, epoch) from two
// loaders, another order for another seed or epoch; every sample exactly once
// per epoch; pixels normalised as (p / 255 - mean) / std against a double
// reference; the last partial batch and drop_last; prefetch 1..4; views that
// stay valid while the worker runs ahead; start_epoch mid-epoch; destruction at
// any point without a hang; the worker's exceptions rethrown by next();
// options checked.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#include <fusor/data/loader.hpp>

#include "data/data_support.hpp"

using namespace data_test;
using fusor::data::labelled_images;
using fusor::data::loader;
using fusor::data::loader_options;
using namespace std::chrono_literals;

namespace {

// One batch as delivered: the sample indices (decoded from the first two
// pixels), the labels and all values, copied out of the loader's memory.
struct delivered {
  std::vector<index_t> samples;
  std::vector<std::int32_t> labels;
  std::vector<float> images;
  bool operator==(const delivered&) const = default;
};

index_t pixel_of(float x, const loader_options& o) { return index_t(std::lround((double(x) * o.std + o.mean) * 255.0)); }

// Checks a batch against the data (labels, every pixel against a double
// reference) and returns what it held.
delivered check_batch(const loader<>::batch& b, const labelled_images& data, const loader_options& o) {
  const index_t pixels = data.rows * data.cols;
  REQUIRE(b.images.extent(0) == b.size);
  REQUIRE(b.images.extent(1) == pixels);
  REQUIRE(b.labels.extent(0) == b.size);
  delivered d;
  for (index_t k = 0; k < b.size; ++k) {
    const index_t sample = pixel_of(b.images(k, 0), o) * 256 + pixel_of(b.images(k, 1), o);
    REQUIRE(sample >= 0);
    REQUIRE(sample < data.count);
    d.samples.push_back(sample);
    d.labels.push_back(b.labels(k));
    CHECK(b.labels(k) == data.labels[std::size_t(sample)]);
    for (index_t p = 0; p < pixels; ++p) {
      const double want = (data.pixels[std::size_t(sample * pixels + p)] / 255.0 - double(o.mean)) / double(o.std);
      const float got = b.images(k, p);
      if (!close(got, want, 1e-6)) FAIL_CHECK("sample ", sample, " pixel ", p, ": ", got, " != ", want);
      d.images.push_back(got);
    }
  }
  return d;
}

// Every batch of one epoch, checked.
std::vector<delivered> run_epoch(loader<>& l, std::uint64_t epoch, const labelled_images& data) {
  l.start_epoch(epoch);
  std::vector<delivered> batches;
  while (const auto* b = l.next()) batches.push_back(check_batch(*b, data, l.options()));
  CHECK(index_t(batches.size()) == l.batches_per_epoch());
  CHECK(l.next() == nullptr);  // and it stays at the end
  return batches;
}

std::vector<index_t> samples_of(const std::vector<delivered>& batches) {
  std::vector<index_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.samples.begin(), b.samples.end());
  return all;
}

}  // namespace

TEST_CASE("loader: the same seed and epoch give the same batches; another seed or epoch another order") {
  const labelled_images data = random_images(1000, 5, 7, 41);
  loader_options o;
  o.batch_size = 64, o.seed = 17;
  loader<> a(data, o), b(data, o);
  CHECK(a.size() == 1000);
  CHECK(a.batches_per_epoch() == 16);
  CHECK(a.options().seed == 17);
  const auto epoch0 = run_epoch(a, 0, data), epoch1 = run_epoch(a, 1, data);
  CHECK(run_epoch(b, 0, data) == epoch0);
  CHECK(run_epoch(b, 1, data) == epoch1);
  CHECK(samples_of(epoch0) != samples_of(epoch1));
  CHECK(run_epoch(a, 0, data) == epoch0);  // an epoch can be repeated
  o.seed = 18;
  loader<> c(data, o);
  CHECK(samples_of(run_epoch(c, 0, data)) != samples_of(epoch0));
  CHECK(samples_of(epoch0) == fusor::data::epoch_permutation(1000, 17, 0));
}

TEST_CASE("loader: every sample exactly once per epoch; the last batch partial, or dropped") {
  const labelled_images data = random_images(1000, 4, 4, 42);
  for (const bool shuffle : {true, false}) {
    loader_options o;
    o.batch_size = 64, o.shuffle = shuffle, o.seed = 3;
    loader<> l(data, o);
    const auto batches = run_epoch(l, 2, data);
    REQUIRE(batches.size() == 16);
    for (std::size_t i = 0; i < 15; ++i) CHECK(batches[i].samples.size() == 64);
    CHECK(batches[15].samples.size() == 1000 - 15 * 64);
    auto all = samples_of(batches);
    if (!shuffle)
      for (index_t i = 0; i < 1000; ++i) CHECK(all[std::size_t(i)] == i);
    std::sort(all.begin(), all.end());
    for (index_t i = 0; i < 1000; ++i) REQUIRE(all[std::size_t(i)] == i);

    o.drop_last = true;
    loader<> dropping(data, o);
    CHECK(dropping.batches_per_epoch() == 15);
    const auto full = run_epoch(dropping, 2, data);
    REQUIRE(full.size() == 15);
    for (std::size_t i = 0; i < 15; ++i) CHECK(full[i] == batches[i]);  // the same order, the tail dropped
    const auto kept = samples_of(full);
    CHECK(std::set<index_t>(kept.begin(), kept.end()).size() == 960);
  }
}

TEST_CASE("loader: pixels become (p / 255 - mean) / std, against a double reference") {
  const labelled_images data = random_images(300, 6, 5, 43);
  loader_options o;
  o.batch_size = 32, o.mean = 0.2860f, o.std = 0.3530f;  // Fashion-MNIST's statistics
  loader<> l(data, o);
  run_epoch(l, 0, data);  // check_batch compares every value
  o.mean = -1.5f, o.std = -4.0f;  // any finite non-zero std, even negative
  loader<> m(data, o);
  run_epoch(m, 0, data);
}

TEST_CASE("loader: prefetch 1 to 4 give the same batches, which stay valid while the worker runs ahead") {
  const labelled_images data = random_images(500, 8, 8, 44);
  loader_options o;
  o.batch_size = 48, o.seed = 9;
  std::vector<delivered> reference;
  for (const int prefetch : {1, 2, 3, 4}) {
    o.prefetch = prefetch;
    loader<> l(data, o);
    l.start_epoch(5);
    std::vector<delivered> batches;
    while (const auto* b = l.next()) {
      const delivered first_look = check_batch(*b, data, o);
      std::this_thread::sleep_for(2ms);  // the worker fills every free slot meanwhile
      CHECK(check_batch(*b, data, o) == first_look);
      batches.push_back(first_look);
    }
    if (reference.empty()) reference = batches;
    CHECK_MESSAGE(batches == reference, "prefetch ", prefetch);
  }
}

TEST_CASE("loader: batch larger than the data, a data set of one sample, an empty one") {
  const labelled_images data = random_images(10, 3, 3, 45);
  loader_options o;
  o.batch_size = 256;
  loader<> l(data, o);
  CHECK(l.batches_per_epoch() == 1);
  CHECK(run_epoch(l, 0, data)[0].samples.size() == 10);
  o.drop_last = true;
  loader<> none(data, o);
  CHECK(none.batches_per_epoch() == 0);
  CHECK(run_epoch(none, 0, data).empty());

  const labelled_images one = take_first(data, 1), empty = take_first(data, 0);
  o.drop_last = false, o.batch_size = 1;
  loader<> single(one, o), nothing(empty, o);
  CHECK(run_epoch(single, 0, one).size() == 1);
  CHECK(run_epoch(nothing, 0, empty).empty());
}

TEST_CASE("loader: start_epoch in the middle of an epoch starts the new one cleanly") {
  const labelled_images data = random_images(700, 4, 5, 46);
  loader_options o;
  o.batch_size = 50, o.seed = 21, o.prefetch = 3;
  loader<> fresh(data, o);
  const auto want = run_epoch(fresh, 1, data);
  loader<> l(data, o);
  l.start_epoch(0);
  for (int i = 0; i < 3; ++i) REQUIRE(l.next() != nullptr);
  CHECK(run_epoch(l, 1, data) == want);
  l.start_epoch(7);  // straight after start_epoch, the worker still filling
  CHECK(run_epoch(l, 1, data) == want);
}

TEST_CASE("loader: destroyed before, during and after an epoch, without a hang") {
  const labelled_images data = random_images(2000, 28, 28, 47);
  loader_options o;
  o.batch_size = 100;
  for (const int prefetch : {1, 2, 4}) {
    o.prefetch = prefetch;
    finishes_within(60s, "destroying loaders", [&] {
      { loader<> never_started(data, o); }
      {
        loader<> just_started(data, o);
        just_started.start_epoch(0);
      }
      {
        loader<> ring_full(data, o);
        ring_full.start_epoch(0);
        REQUIRE(ring_full.next() != nullptr);
        std::this_thread::sleep_for(5ms);  // the worker waits for a free slot
      }
      {
        loader<> finished(data, o);
        finished.start_epoch(0);
        while (finished.next()) {
        }
      }
    });
  }
}

TEST_CASE("loader: an exception in the worker is rethrown by next(), after the batches before it") {
  labelled_images data = random_images(400, 4, 4, 48);
  loader_options o;
  o.batch_size = 40, o.shuffle = false, o.prefetch = 2;
  loader<> l(data, o);
  data.labels[130] = 10;  // changed after the loader checked it: batch 3 fails in the worker
  l.start_epoch(0);
  finishes_within(60s, "next() after a worker failure", [&] {
    for (int i = 0; i < 3; ++i) REQUIRE(l.next() != nullptr);
    expect_error<fusor::data_error>([&] { l.next(); }, {"label 10 of sample 130", "[0, 10)"});
    expect_error<fusor::data_error>([&] { l.next(); }, {"label 10 of sample 130"});  // until start_epoch
  });
  data.labels[130] = 3;
  CHECK(run_epoch(l, 0, data).size() == 10);

  data.pixels.resize(100);  // the data shrank under the loader
  l.start_epoch(1);
  finishes_within(60s, "next() after a worker failure", [&] {
    expect_error<fusor::data_error>([&] { l.next(); }, {"changed after the loader was made", "100 pixels", "400 samples"});
  });
}

TEST_CASE("loader: options and data are checked when it is made; next() needs start_epoch()") {
  const labelled_images data = random_images(20, 2, 2, 49);
  loader_options o;
  o.batch_size = 0;
  expect_error<fusor::error>([&] { loader<> l(data, o); }, {"batch_size is 0"});
  o.batch_size = 4, o.prefetch = 0;
  expect_error<fusor::error>([&] { loader<> l(data, o); }, {"prefetch is 0"});
  o.prefetch = 2, o.std = 0.0f;
  expect_error<fusor::error>([&] { loader<> l(data, o); }, {"std is 0"});
  o.std = 1e-45f;  // a denormal: 1 / std is inf
  expect_error<fusor::error>([&] { loader<> l(data, o); }, {"finite and non-zero"});
  o.std = 1.0f;
  // A batch larger than any count: one partial batch ((count + size - 1) / size would overflow).
  o.batch_size = std::numeric_limits<index_t>::max();
  CHECK(loader<>(data, o).batches_per_epoch() == 1);
  o.drop_last = true;
  CHECK(loader<>(data, o).batches_per_epoch() == 0);
  o.drop_last = false, o.batch_size = 4;
  labelled_images bad = data;
  bad.labels.pop_back();
  expect_error<fusor::data_error>([&] { loader<> l(bad, o); }, {"labels holds 19", "count is 20"});
  loader<> l(data, o);
  expect_error<fusor::error>([&] { l.next(); }, {"before start_epoch()"});
}
