// fusor/data/idx.hpp — read_idx: reads an IDX file (the format of MNIST and
// Fashion-MNIST), gzip-compressed or raw, and checks everything its header
// claims before anyone trusts it.
//
// An IDX file is a 4-byte magic number (0x00 0x00, an element type code, the
// number of dimensions), one big-endian 32-bit size per dimension, then the
// elements in row-major order, multi-byte ones big-endian. zlib's gzread reads
// both compressed and raw files. Every problem throws fusor::data_error naming
// the file and what is wrong: not found, bad magic (the bytes found),
// unsupported type, truncated header or data (bytes expected and found),
// trailing bytes, corrupt gzip data. Link fusor::data (zlib).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/data/error.hpp"

namespace fusor::data {

/// An IDX file's contents: element type code, shape, and the elements' bytes in
/// the host's byte order (multi-byte elements are converted from big-endian).
struct idx_array {
  std::uint8_t type_code = 0;  ///< The element type (idx_type_name() names it).
  std::vector<index_t> shape;  ///< One extent per dimension.
  std::vector<std::uint8_t> bytes;  ///< The elements, row-major, in the host's byte order.
};

/// Bytes per element of an IDX type code; 0 for a code IDX does not define.
constexpr std::size_t idx_element_size(std::uint8_t type_code) {
  switch (type_code) {
    case 0x08: return 1;  // unsigned byte
    case 0x09: return 1;  // signed byte
    case 0x0B: return 2;  // short
    case 0x0C: return 4;  // int
    case 0x0D: return 4;  // float
    case 0x0E: return 8;  // double
    default: return 0;
  }
}

/// The name of an IDX type code: "ubyte", "byte", "short", "int", "float", "double", or "unknown".
constexpr const char* idx_type_name(std::uint8_t type_code) {
  switch (type_code) {
    case 0x08: return "ubyte";
    case 0x09: return "byte";
    case 0x0B: return "short";
    case 0x0C: return "int";
    case 0x0D: return "float";
    case 0x0E: return "double";
    default: return "unknown";
  }
}

namespace detail {

FUSOR_DECL std::string hex_byte(unsigned value);

// A gzip (or raw) file open for reading; read() throws data_error on corrupt data.
class idx_source {
 public:
  explicit idx_source(const std::filesystem::path& path);
  idx_source(const idx_source&) = delete;
  idx_source& operator=(const idx_source&) = delete;
  ~idx_source() { gzclose(file_); }

  // Reads up to `n` bytes and returns how many there were: fewer only at the
  // end of the data (then ended_early() says whether a gzip stream was cut off).
  std::size_t read(void* destination, std::size_t n);
  // Whether the gzip stream stopped before its end (a truncated .gz file).
  bool ended_early() const;
  // What a truncation message adds when the cause is a gzip stream cut off.
  std::string early_end_note() const;
  // Once every byte is read: refuses bytes after a gzip stream, which zlib ignores. The stream's last 4 bytes
  // (ISIZE) hold its length mod 2^32; junk appended to the file ends it with other bytes. Where they differ,
  // the file may still be several gzip members one after another (concatenated files, pigz): then it is
  // inflated again member by member, and must end at a member's end having given as many bytes.
  void check_nothing_after_stream() const;

  [[noreturn]] void fail(const std::string& what) const;

 private:
  // A truncated stream (Z_BUF_ERROR) is reported by the caller, who knows the
  // sizes; any other zlib error is corrupt data or an I/O failure.
  void check_stream() const;

  std::filesystem::path path_;
  gzFile file_ = nullptr;
  std::uint64_t bytes_read_ = 0;  // decompressed
};

inline std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

// Multi-byte elements arrive big-endian; turn them into the host's order.
FUSOR_DECL void to_host_order(std::vector<std::uint8_t>& bytes, std::size_t element_size);

// IDX files hold at most a few GiB; a header claiming more is corrupt.
inline constexpr std::uint64_t idx_max_bytes = std::uint64_t(1) << 40;

}  // namespace detail

/// Reads an IDX file, gzip-compressed or raw. Throws data_error naming the file and what is wrong (not
/// found, bad magic, unsupported type, truncated, trailing bytes, corrupt gzip data).
FUSOR_DECL idx_array read_idx(const std::filesystem::path& file);

}  // namespace fusor::data

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/data/impl/idx.ipp"
#endif
