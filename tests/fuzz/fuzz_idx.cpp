// libFuzzer target: data::read_idx on a raw, a gzipped and a truncated gzipped
// file (the first byte chooses; the second, where the truncation cuts). Any
// bytes either read or throw fusor::data_error; what reads agrees with its header.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fusor/data/idx.hpp>

#include "fuzz_support.hpp"
#include "gzip_bytes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint8_t mode = data[0] % 3, cut = data[1];
  const std::span<const std::uint8_t> body(data + 2, size - 2);
  const auto file = fuzz::scratch() / (mode == 0 ? "input-idx" : "input-idx.gz");
  if (mode == 0) {
    fuzz::write(file, body);
  } else {
    std::vector<std::uint8_t> packed = fuzz::gzip(body);
    if (mode == 2) packed.resize(packed.size() * cut / 256);  // cut short, header included at times
    fuzz::write(file, packed);
  }
  try {
    const fusor::data::idx_array a = fusor::data::read_idx(file);
    std::size_t count = 1;
    for (fusor::index_t e : a.shape) count *= std::size_t(e);
    fuzz::require(a.bytes.size() == count * fusor::data::idx_element_size(a.type_code));
  } catch (const fusor::data_error&) {
  }
  return 0;
}
