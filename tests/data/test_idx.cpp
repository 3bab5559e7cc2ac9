// read_idx: random arrays of every IDX element type and several ranks written
// raw and gzipped, read back byte for byte (multi-byte elements in host order);
// every error case names the file and the numbers: not found, a directory, bad
// magic (the bytes found), unsupported type code, truncated header, truncated
// data (raw and gzip), trailing bytes, a gzip stream cut off or corrupt.
#include <cstring>
#include <string>
#include <vector>

#include <fusor/data/idx.hpp>

#include "data/data_support.hpp"

using namespace data_test;
using fusor::data::idx_array;
using fusor::data::read_idx;

namespace {

struct idx_case {
  std::uint8_t type_code;
  std::vector<std::uint32_t> shape;
};

std::size_t element_count(const std::vector<std::uint32_t>& shape) {
  std::size_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

// A small valid file's bytes (ubyte [3, 4, 5]) and its elements.
bytes small_file(bytes* elements = nullptr) {
  const bytes data = random_bytes(60, 7);
  if (elements) *elements = data;
  return idx_file(0x08, {3, 4, 5}, data, 1);
}

}  // namespace

TEST_CASE("read_idx reads back every element type and rank, raw and gzipped") {
  const std::vector<idx_case> cases = {
      {0x08, {1000}}, {0x08, {17, 28, 28}}, {0x09, {5, 3}}, {0x0B, {7, 11}},
      {0x0C, {2, 3, 4, 5}}, {0x0D, {33}}, {0x0E, {4, 9}}, {0x08, {0, 28, 28}},
  };
  scratch_directory dir;
  std::uint32_t seed = 100;
  for (const auto& c : cases) {
    const std::size_t size = fusor::data::idx_element_size(c.type_code);
    REQUIRE(size > 0);
    const bytes elements = random_bytes(element_count(c.shape) * size, seed++);
    const bytes file = idx_file(c.type_code, c.shape, elements, size);
    for (const bool gzip : {false, true}) {
      const auto path = dir / (std::string("case") + std::to_string(seed) + (gzip ? ".idx.gz" : ".idx"));
      gzip ? write_gzip(path, file) : write_raw(path, file);
      INFO(fusor::data::idx_type_name(c.type_code), " rank ", c.shape.size(), gzip ? " gzip" : " raw");
      const idx_array got = read_idx(path);
      CHECK(got.type_code == c.type_code);
      REQUIRE(got.shape.size() == c.shape.size());
      for (std::size_t r = 0; r < c.shape.size(); ++r) CHECK(got.shape[r] == index_t(c.shape[r]));
      CHECK(got.bytes == elements);  // host order: the writer made them big-endian
    }
  }
}

TEST_CASE("read_idx: multi-byte elements arrive as host values") {
  scratch_directory dir;
  const std::vector<std::int32_t> values = {-123456789, 42, 0x01020304, -1};
  bytes elements(values.size() * 4);
  std::memcpy(elements.data(), values.data(), elements.size());
  write_gzip(dir / "ints.gz", idx_file(0x0C, {4}, elements, 4));
  const idx_array got = read_idx(dir / "ints.gz");
  std::vector<std::int32_t> read(values.size());
  REQUIRE(got.bytes.size() == read.size() * 4);
  std::memcpy(read.data(), got.bytes.data(), got.bytes.size());
  CHECK(read == values);
}

TEST_CASE("idx_element_size and idx_type_name know IDX's six types") {
  CHECK(fusor::data::idx_element_size(0x08) == 1);
  CHECK(fusor::data::idx_element_size(0x09) == 1);
  CHECK(fusor::data::idx_element_size(0x0B) == 2);
  CHECK(fusor::data::idx_element_size(0x0C) == 4);
  CHECK(fusor::data::idx_element_size(0x0D) == 4);
  CHECK(fusor::data::idx_element_size(0x0E) == 8);
  CHECK(fusor::data::idx_element_size(0x0A) == 0);
  CHECK(std::string(fusor::data::idx_type_name(0x0D)) == "float");
  CHECK(std::string(fusor::data::idx_type_name(0x07)) == "unknown");
}

TEST_CASE("read_idx: a missing file or a directory is named") {
  scratch_directory dir;
  const auto missing = dir / "no-such-file.gz";
  expect_error<fusor::data_error>([&] { read_idx(missing); }, {missing.c_str(), "not found"});
  expect_error<fusor::data_error>([&] { read_idx(dir.path()); }, {dir.path().c_str(), "is a directory"});
}

TEST_CASE("read_idx: a wrong magic number shows the bytes found") {
  scratch_directory dir;
  for (const bool gzip : {false, true}) {
    bytes file = small_file();
    // Inside a gzip stream: what a doubly gzipped file would start with. (A raw
    // file starting so would be taken for gzip, and be corrupt gzip instead.)
    file[0] = gzip ? 0x1f : 0x12, file[1] = gzip ? 0x8b : 0x34;
    const auto path = dir / (gzip ? "magic.gz" : "magic");
    gzip ? write_gzip(path, file) : write_raw(path, file);
    expect_error<fusor::data_error>([&] { read_idx(path); },
                                    {path.c_str(), "bad magic number", gzip ? "1f 8b 08 03" : "12 34 08 03"});
  }
}

TEST_CASE("read_idx: an unsupported type code is named") {
  scratch_directory dir;
  bytes file = small_file();
  file[2] = 0x07;
  write_gzip(dir / "type.gz", file);
  expect_error<fusor::data_error>([&] { read_idx(dir / "type.gz"); },
                                  {(dir / "type.gz").c_str(), "unsupported element type code 0x07"});
}

TEST_CASE("read_idx: a truncated header says how many bytes it needs and found") {
  scratch_directory dir;
  const bytes file = small_file();
  for (const bool gzip : {false, true}) {
    const auto short_magic = dir / (gzip ? "magic2.gz" : "magic2");
    const bytes two(file.begin(), file.begin() + 2);
    gzip ? write_gzip(short_magic, two) : write_raw(short_magic, two);
    expect_error<fusor::data_error>([&] { read_idx(short_magic); },
                                    {short_magic.c_str(), "truncated", "4 bytes", "found 2"});
    // Magic and one and a half of the three sizes: 16 bytes needed, 10 found.
    const auto short_sizes = dir / (gzip ? "sizes.gz" : "sizes");
    const bytes ten(file.begin(), file.begin() + 10);
    gzip ? write_gzip(short_sizes, ten) : write_raw(short_sizes, ten);
    expect_error<fusor::data_error>([&] { read_idx(short_sizes); },
                                    {short_sizes.c_str(), "truncated", "3 dimensions", "16 bytes", "found 10"});
  }
}

TEST_CASE("read_idx: truncated data says the bytes expected and found") {
  scratch_directory dir;
  const bytes file = small_file();  // 16 header bytes and 60 of data
  for (const bool gzip : {false, true}) {
    const auto path = dir / (gzip ? "data.gz" : "data");
    const bytes cut(file.begin(), file.end() - 13);
    gzip ? write_gzip(path, cut) : write_raw(path, cut);
    expect_error<fusor::data_error>([&] { read_idx(path); },
                                    {path.c_str(), "truncated", "expected 60 bytes of data", "found 47", "[3, 4, 5]"});
  }
}

TEST_CASE("read_idx: trailing bytes are counted") {
  scratch_directory dir;
  bytes file = small_file();
  const bytes extra = random_bytes(9, 3);
  file.insert(file.end(), extra.begin(), extra.end());
  for (const bool gzip : {false, true}) {
    const auto path = dir / (gzip ? "trailing.gz" : "trailing");
    gzip ? write_gzip(path, file) : write_raw(path, file);
    expect_error<fusor::data_error>([&] { read_idx(path); },
                                    {path.c_str(), "9 trailing bytes", "after the 60 bytes of data"});
  }
}

TEST_CASE("read_idx: a gzip stream cut off or corrupted is reported, never read as data") {
  scratch_directory dir;
  const bytes file = idx_file(0x08, {50, 40}, random_bytes(2000, 11), 1);  // random: gzip cannot shrink it much
  write_gzip(dir / "whole.gz", file);
  const bytes compressed = read_raw(dir / "whole.gz");
  REQUIRE(compressed.size() > 1000);

  // Cut in the middle of the deflate data: fewer bytes of data than the header says.
  write_raw(dir / "cut.gz", bytes(compressed.begin(), compressed.begin() + std::ptrdiff_t(compressed.size() / 2)));
  expect_error<fusor::data_error>([&] { read_idx(dir / "cut.gz"); },
                                  {(dir / "cut.gz").c_str(), "truncated", "expected 2000 bytes of data", "gzip stream ends early"});

  // Only the 8-byte trailer (CRC and length) missing: all data there, the stream still incomplete.
  write_raw(dir / "no_trailer.gz", bytes(compressed.begin(), compressed.end() - 8));
  expect_error<fusor::data_error>([&] { read_idx(dir / "no_trailer.gz"); },
                                  {(dir / "no_trailer.gz").c_str(), "truncated", "gzip stream ends early"});

  // A flipped byte in the CRC: corrupt data, named as such.
  bytes bad_crc = compressed;
  bad_crc[bad_crc.size() - 6] ^= 0xFF;
  write_raw(dir / "bad_crc.gz", bad_crc);
  expect_error<fusor::data_error>([&] { read_idx(dir / "bad_crc.gz"); },
                                  {(dir / "bad_crc.gz").c_str(), "corrupt", "incorrect data check"});

  // Junk appended after the whole stream, which zlib passes over: refused, 1 byte or many.
  for (const std::size_t junk : {std::size_t(1), std::size_t(5), std::size_t(300)}) {
    INFO(junk, " junk bytes");
    bytes appended = compressed;
    const bytes extra = random_bytes(junk, 13);
    appended.insert(appended.end(), extra.begin(), extra.end());
    write_raw(dir / "junk.gz", appended);
    expect_error<fusor::data_error>([&] { read_idx(dir / "junk.gz"); },
                                    {(dir / "junk.gz").c_str(), "bytes after its gzip stream", "held 2012 bytes"});
  }
  CHECK(read_idx(dir / "whole.gz").bytes.size() == 2000);  // the whole stream alone reads
}

TEST_CASE("read_idx: gzip members one after another read as one file; junk or a cut member after them do not") {
  // What `cat a.gz b.gz` or pigz make: valid gzip (gzip -t, zcat), though the last 4 bytes give the last member's
  // length only.
  scratch_directory dir;
  const bytes file = idx_file(0x08, {50, 40}, random_bytes(2000, 17), 1);
  bytes members;
  for (const auto& [begin, end] : {std::pair<std::size_t, std::size_t>{0, 700}, {700, 701}, {701, file.size()}}) {
    write_gzip(dir / "piece.gz", bytes(file.begin() + std::ptrdiff_t(begin), file.begin() + std::ptrdiff_t(end)));
    const bytes piece = read_raw(dir / "piece.gz");
    members.insert(members.end(), piece.begin(), piece.end());
  }
  write_raw(dir / "members.gz", members);
  const auto read = read_idx(dir / "members.gz");
  CHECK(read.bytes == bytes(file.begin() + 12, file.end()));  // after the 4-byte magic and two 4-byte sizes

  bytes junk = members;
  junk.push_back(0x5a);
  write_raw(dir / "members_junk.gz", junk);
  expect_error<fusor::data_error>([&] { read_idx(dir / "members_junk.gz"); },
                                  {(dir / "members_junk.gz").c_str(), "bytes after its gzip stream"});
  // A fourth member cut short after the three whole ones.
  write_gzip(dir / "piece.gz", file);
  const bytes extra = read_raw(dir / "piece.gz");
  bytes cut = members;
  cut.insert(cut.end(), extra.begin(), extra.begin() + std::ptrdiff_t(extra.size() / 2));
  write_raw(dir / "members_cut.gz", cut);
  expect_error<fusor::data_error>([&] { read_idx(dir / "members_cut.gz"); }, {(dir / "members_cut.gz").c_str()});
}

TEST_CASE("read_idx: a header describing more than 2^40 bytes is refused before reading") {
  scratch_directory dir;
  const bytes header = idx_file(0x0E, {65536, 65536, 65536}, {}, 8);
  write_raw(dir / "huge", header);
  expect_error<fusor::data_error>([&] { read_idx(dir / "huge"); },
                                  {(dir / "huge").c_str(), "[65536, 65536, 65536]", "more than 2^40 bytes"});
}
