// fusor/data/impl/idx.ipp — definitions of fusor/data/idx.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fusor::data {

namespace detail {

FUSOR_DECL std::string hex_byte(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "%02x", value & 0xFFu);
  return text;
}

FUSOR_DECL idx_source::idx_source(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) fail("not found");
  if (std::filesystem::is_directory(status)) fail("is a directory, not a file");
  errno = 0;
  file_ = gzopen(path.c_str(), "rb");
  if (!file_) fail(std::string("cannot be opened: ") + (errno ? std::strerror(errno) : "out of memory"));
  gzbuffer(file_, 1 << 17);  // fewer, larger reads than zlib's default 8 KiB
}

FUSOR_DECL std::size_t idx_source::read(void* destination, std::size_t n) {
  std::size_t total = 0;
  auto* out = static_cast<unsigned char*>(destination);
  while (total < n) {
    const unsigned piece = static_cast<unsigned>(std::min<std::size_t>(n - total, 1u << 30));
    const int got = gzread(file_, out + total, piece);
    if (got < 0) check_stream();
    if (got <= 0) break;
    total += static_cast<std::size_t>(got);
    if (static_cast<unsigned>(got) < piece) break;
  }
  check_stream();
  bytes_read_ += total;
  return total;
}

// Whether `path` is nothing but complete gzip members, inflating to `expected` bytes in all.
FUSOR_DECL bool whole_gzip_members(const std::filesystem::path& path, std::uint64_t expected) {
  std::ifstream raw(path, std::ios::binary);
  std::vector<unsigned char> in(1 << 17), out(1 << 17);
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return false;  // 15 + 16: a gzip wrapper
  std::uint64_t produced = 0;
  bool member_ended = false, fine = true;
  while (fine) {
    if (z.avail_in == 0) {
      raw.read(reinterpret_cast<char*>(in.data()), std::streamsize(in.size()));
      z.next_in = in.data();
      z.avail_in = static_cast<uInt>(raw.gcount());
      if (z.avail_in == 0) break;  // the file's end
    }
    if (member_ended) {  // what follows a member must be another
      if (inflateReset(&z) != Z_OK) fine = false;
      member_ended = false;
    }
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int code = inflate(&z, Z_NO_FLUSH);
    produced += out.size() - z.avail_out;
    if (code == Z_STREAM_END) member_ended = true;
    else if (code != Z_OK) fine = false;
  }
  inflateEnd(&z);
  return fine && member_ended && !raw.bad() && produced == expected;
}

FUSOR_DECL void idx_source::check_nothing_after_stream() const {
  if (gzdirect(file_)) return;  // a raw file: read() saw every byte
  std::ifstream raw(path_, std::ios::binary | std::ios::ate);
  unsigned char isize[4] = {};
  if (!raw || raw.tellg() < 4 || !raw.seekg(-4, std::ios::end) || !raw.read(reinterpret_cast<char*>(isize), 4))
    fail("cannot be read again to check its end");
  const std::uint32_t saved = std::uint32_t(isize[0]) | (std::uint32_t(isize[1]) << 8) |
                              (std::uint32_t(isize[2]) << 16) | (std::uint32_t(isize[3]) << 24);
  if (saved != std::uint32_t(bytes_read_) && !whole_gzip_members(path_, bytes_read_))
    fail("has bytes after its gzip stream, or a damaged one: the file's last 4 bytes give a length of " +
         std::to_string(saved) + " (mod 2^32), the stream held " + std::to_string(bytes_read_) + " bytes");
}

FUSOR_DECL bool idx_source::ended_early() const {
  int code = Z_OK;
  gzerror(file_, &code);
  return code == Z_BUF_ERROR;
}

FUSOR_DECL std::string idx_source::early_end_note() const {
  return ended_early() ? " (the gzip stream ends early)" : "";
}

FUSOR_DECL void idx_source::fail(const std::string& what) const {
  throw data_error("fusor: IDX file '" + path_.string() + "' " + what);
}

FUSOR_DECL void idx_source::check_stream() const {
  int code = Z_OK;
  const char* message = gzerror(file_, &code);
  if (code == Z_OK || code == Z_BUF_ERROR) return;
  if (code == Z_ERRNO) fail(std::string("cannot be read: ") + std::strerror(errno));
  std::string why = message ? message : "unknown";
  const std::string own_prefix = path_.string() + ": ";  // zlib names the file too; once is enough
  if (why.starts_with(own_prefix)) why.erase(0, own_prefix.size());
  fail("is corrupt: gzip data error: " + why);
}

FUSOR_DECL void to_host_order(std::vector<std::uint8_t>& bytes, std::size_t element_size) {
  if constexpr (std::endian::native == std::endian::little) {
    if (element_size < 2) return;
    for (std::size_t i = 0; i + element_size <= bytes.size(); i += element_size)
      std::reverse(bytes.begin() + std::ptrdiff_t(i), bytes.begin() + std::ptrdiff_t(i + element_size));
  }
}

}  // namespace detail

FUSOR_DECL idx_array read_idx(const std::filesystem::path& file) {
  detail::idx_source source(file);
  idx_array result;

  unsigned char magic[4];
  const std::size_t magic_found = source.read(magic, 4);
  if (magic_found < 4)
    source.fail("is truncated: its header needs 4 bytes for the magic number, found " + std::to_string(magic_found) +
                source.early_end_note());
  if (magic[0] != 0 || magic[1] != 0)
    source.fail("has a bad magic number: found bytes " + detail::hex_byte(magic[0]) + " " + detail::hex_byte(magic[1]) +
                " " + detail::hex_byte(magic[2]) + " " + detail::hex_byte(magic[3]) +
                ", expected 00 00 followed by a type code and the number of dimensions");
  result.type_code = magic[2];
  const std::size_t element_size = idx_element_size(result.type_code);
  if (element_size == 0)
    source.fail("has an unsupported element type code 0x" + detail::hex_byte(magic[2]) +
                " (IDX defines 08 ubyte, 09 byte, 0b short, 0c int, 0d float, 0e double)");

  const std::size_t rank = magic[3];
  std::vector<unsigned char> sizes(4 * rank);
  const std::size_t sizes_found = source.read(sizes.data(), sizes.size());
  if (sizes_found < sizes.size())
    source.fail("is truncated: its header gives " + std::to_string(rank) + " dimensions and needs " +
                std::to_string(4 + sizes.size()) + " bytes, found " + std::to_string(4 + sizes_found) +
                source.early_end_note());

  std::uint64_t expected = element_size;
  std::string shape_text = "[";
  for (std::size_t r = 0; r < rank; ++r) {
    const std::uint32_t extent = detail::big_endian_u32(&sizes[4 * r]);
    result.shape.push_back(index_t(extent));
    shape_text += (r ? ", " : "") + std::to_string(extent);
    // Capped at the limit rather than multiplied past it, so no product overflows.
    if (expected != 0 && extent > detail::idx_max_bytes / expected) expected = detail::idx_max_bytes + 1;
    else expected *= extent;
  }
  shape_text += "]";
  if (expected > detail::idx_max_bytes)
    source.fail("has a header describing shape " + shape_text + " of " + idx_type_name(result.type_code) +
                ", more than 2^40 bytes: the header is corrupt");

  // Read in pieces, so a corrupt header claiming gigabytes costs memory only as data arrives.
  const std::size_t want = static_cast<std::size_t>(expected);
  result.bytes.reserve(std::min<std::size_t>(want, std::size_t(1) << 28));
  while (result.bytes.size() < want) {
    const std::size_t before = result.bytes.size();
    const std::size_t piece = std::min<std::size_t>(want - before, std::size_t(1) << 26);
    result.bytes.resize(before + piece);
    const std::size_t got = source.read(result.bytes.data() + before, piece);
    result.bytes.resize(before + got);
    if (got < piece) break;
  }
  if (result.bytes.size() < want)
    source.fail("is truncated: expected " + std::to_string(want) + " bytes of data (shape " + shape_text + " of " +
                idx_type_name(result.type_code) + "), found " + std::to_string(result.bytes.size()) +
                source.early_end_note());

  unsigned char extra[4096];
  std::uint64_t trailing = 0;
  for (std::size_t got; (got = source.read(extra, sizeof extra)) > 0;) trailing += got;
  if (trailing > 0)
    source.fail("has " + std::to_string(trailing) + " trailing bytes after the " + std::to_string(want) +
                " bytes of data its header describes (shape " + shape_text + ")");
  if (source.ended_early())
    source.fail("is truncated: the gzip stream ends early, after all " + std::to_string(want) +
                " bytes of data (its checksum is missing)");
  source.check_nothing_after_stream();

  detail::to_host_order(result.bytes, element_size);
  return result;
}

}  // namespace fusor::data
