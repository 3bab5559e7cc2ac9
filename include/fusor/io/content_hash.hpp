// fusor/io/content_hash.hpp — a fast 64-bit hash of a file's bytes, so that a
// reader can tell a damaged file (a flipped bit, a block of another file) from
// the one a writer saved, where the size alone cannot. A sharded checkpoint's
// manifest records each shard's; the reader checks it.
//
// Four lanes, each word folded in by (lane ^ word) * odd, then an xor-shift:
// both steps are bijections, so a change of any one 8-byte word always changes
// the hash; other damage goes unseen with probability about 2^-64. It guards
// against accidents, not against an attacker. Words are read in the host's
// byte order (the files are read where they were written: little-endian).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace fusor::io {

namespace detail {
inline constexpr std::uint64_t hash_multiplier = 0x9E3779B97F4A7C15ull;  // odd: multiplying by it is a bijection
inline std::uint64_t hash_fold(std::uint64_t lane, std::uint64_t word) {
  lane = (lane ^ word) * hash_multiplier;
  return lane ^ (lane >> 31);
}
}  // namespace detail

/// The 64-bit content hash of `bytes` (see the top of this header).
inline std::uint64_t content_hash(std::span<const std::byte> bytes) {
  std::uint64_t lanes[4] = {1, 2, 3, 4};
  const std::size_t words = bytes.size() / 8;
  const auto word = [&](std::size_t i) {
    std::uint64_t w;
    std::memcpy(&w, bytes.data() + i * 8, 8);
    return w;
  };
  std::size_t i = 0;
  for (; i + 4 <= words; i += 4)
    for (std::size_t l = 0; l < 4; ++l) lanes[l] = detail::hash_fold(lanes[l], word(i + l));
  for (; i < words; ++i) lanes[i % 4] = detail::hash_fold(lanes[i % 4], word(i));
  std::uint64_t tail = 0;
  if (bytes.size() % 8 != 0) std::memcpy(&tail, bytes.data() + words * 8, bytes.size() % 8);
  lanes[0] = detail::hash_fold(lanes[0], tail);
  std::uint64_t hash = bytes.size();
  for (const std::uint64_t lane : lanes) hash = detail::hash_fold(hash, lane);
  return hash;
}

/// The hash as 16 lowercase hex digits, as files' metadata holds it.
inline std::string content_hash_text(std::uint64_t hash) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int k = 15; k >= 0; --k, hash >>= 4) text[std::size_t(k)] = digits[hash & 15];
  return text;
}

}  // namespace fusor::io
