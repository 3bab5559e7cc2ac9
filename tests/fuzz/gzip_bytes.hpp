// tests/fuzz/gzip_bytes.hpp — bytes gzip-compressed in memory (zlib's deflate
// with the gzip wrapper), so a fuzz target can hand a reader compressed, and
// truncated compressed, versions of its input.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include <zlib.h>

namespace fuzz {

inline std::vector<std::uint8_t> gzip(std::span<const std::uint8_t> bytes) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<std::uint8_t> out(deflateBound(&z, uLong(bytes.size())) + 32);
  z.next_in = const_cast<Bytef*>(bytes.data());
  z.avail_in = uInt(bytes.size());
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace fuzz
