// A plain C++ program linking fusor::data (zlib and threads) as a user would:
// a loader over a small data set made in memory delivers every sample once,
// and read_idx reports a missing file. Exits non-zero when anything is wrong.
#include <cstdio>
#include <vector>

#include <fusor/data/idx.hpp>
#include <fusor/data/loader.hpp>

int main() {
  fusor::data::labelled_images data;
  data.count = 100, data.rows = 2, data.cols = 3;
  for (int i = 0; i < 100; ++i) {
    data.labels.push_back(i % 10);
    for (int p = 0; p < 6; ++p) data.pixels.push_back(static_cast<std::uint8_t>(i));
  }
  fusor::data::loader_options options;
  options.batch_size = 32, options.seed = 1;
  fusor::data::loader<> loader(data, options);
  loader.start_epoch(0);
  std::vector<int> seen(100, 0);
  int wrong = 0;
  while (const auto* batch = loader.next())
    for (fusor::index_t k = 0; k < batch->size; ++k) {
      const int sample = static_cast<int>(batch->images(k, 0) * 255.0f + 0.5f);
      ++seen[sample];
      wrong += batch->labels(k) != sample % 10;
    }
  for (const int times : seen) wrong += times != 1;

  bool reported = false;
  try {
    fusor::data::read_idx("no-such-file-idx1-ubyte.gz");
  } catch (const fusor::data_error&) {
    reported = true;
  }
  wrong += !reported;
  std::printf("fusor consumer (data): %s, %d wrong\n", wrong ? "FAILED" : "OK", wrong);
  return wrong ? 1 : 0;
}
