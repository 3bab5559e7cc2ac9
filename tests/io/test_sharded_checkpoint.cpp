// io::shard_writer, io::write_manifest and io::sharded_checkpoint_reader: a
// checkpoint saved in pieces by several ranks (tensor-parallel slices, ZeRO
// ranges of flattened tensors, a replicated tensor saved once) reads back
// bit for bit in any other pieces; random partitions of a 3-D tensor, dealt
// out to ranks that may hold several pieces of it, saved
// and read back in random boxes and ranges, agree element for element; an
// unfinished save, a missing rank, overlapping or missing pieces, another
// save's shard and mismatched dtypes or shapes are refused with errors that
// name them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fusor/io/content_hash.hpp>
#include <fusor/io/file.hpp>
#include <fusor/io/sharded_checkpoint.hpp>

#include "io/io_support.hpp"

using namespace io_test;

namespace {

using matrix = dextents<index_t, 2>;
using vector = dextents<index_t, 1>;
using flat = dextents<index_t, 1>;

// The elements of `whole` (row-major) that `piece` holds, in its order.
template <class T>
std::vector<T> elements_of(const std::vector<T>& whole, const fio::tensor_piece& piece) {
  std::vector<T> out;
  const std::size_t rank = piece.shape.size();
  for (index_t k = 0; k < piece.elements(); ++k) {
    index_t at = piece.first + k, offset = 0;
    std::vector<index_t> local(rank);
    for (std::size_t a = rank; a-- > 0;) local[a] = at % piece.shape[a], at /= piece.shape[a];
    for (std::size_t a = 0; a < rank; ++a) offset = offset * piece.global_shape[a] + piece.begin[a] + local[a];
    out.push_back(whole[std::size_t(offset)]);
  }
  return out;
}

template <class T>
host_tensor<T, flat> tensor_of(const std::vector<T>& values) {
  host_tensor<T, flat> t(index_t(values.size()));
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

template <class T>
std::vector<T> random_values(index_t count, std::uint64_t seed) {
  std::vector<T> v(static_cast<std::size_t>(count));
  std::mt19937_64 rng(seed);
  for (T& x : v) x = random_element<T>(rng);
  return v;
}

// Reads `piece` of `name` and compares it with the original, element for element.
template <class T>
void expect_piece(const fio::sharded_checkpoint_reader& ckpt, const std::string& name, const std::vector<T>& whole,
                  const fio::tensor_piece& piece) {
  host_tensor<T, flat> got(piece.elements());
  std::fill(got.data(), got.data() + got.size(), convert<T>(-7777.0));  // poison
  ckpt.read(name, piece, got);
  const std::vector<T> want = elements_of(whole, piece);
  index_t wrong = 0;
  for (index_t i = 0; i < got.size(); ++i) wrong += !(got(i) == want[std::size_t(i)]);
  INFO(name, " at ", fio::shape_text(piece.begin), " extents ", fio::shape_text(piece.shape), " first ", piece.first,
       " count ", piece.elements());
  CHECK(wrong == 0);
}

}  // namespace

FUSOR_TEST_CASE("a checkpoint saved as two tensor-parallel ranks reads back in any other split") {
  const scratch_directory dir("sharded_tp");
  const std::vector<index_t> w_shape{6, 10};
  const auto w = random_values<float>(60, 1);
  const auto b = random_values<float>(7, 2);
  const auto steps = random_values<std::int64_t>(1, 3);
  const auto h = random_values<bfloat16>(4 * 6, 4);
  for (int rank = 0; rank < 2; ++rank) {
    fio::shard_writer shard(dir.path, rank, 2, "step-5");
    const auto slice = fio::tensor_piece::slice(w_shape, 0, rank, 2);
    shard.add("0.weight", slice, tensor_of(elements_of(w, slice)));
    const auto h_slice = fio::tensor_piece::slice({4, 6}, 1, rank, 2);  // a column split of a bf16 tensor
    shard.add("1.weight", h_slice, tensor_of(elements_of(h, h_slice)));
    if (rank == 0) {  // replicated: one rank saves it
      shard.add("0.bias", fio::tensor_piece::whole({7}), tensor_of(b));
      shard.add("steps", fio::tensor_piece::whole({}), tensor_of(steps));
    }
    shard.save();
  }
  fio::write_manifest(dir.path, 2, "step-5", {{"step", "5"}, {"mesh", "1x2x1"}});

  const fio::sharded_checkpoint_reader ckpt(dir.path);
  CHECK(ckpt.ranks() == 2);
  CHECK(ckpt.metadata("step") == "5");
  CHECK(ckpt.metadata("mesh") == "1x2x1");
  CHECK(ckpt.global_shape("0.weight") == w_shape);
  // Every tensor once, sorted, whichever ranks saved its pieces.
  CHECK(ckpt.names() == std::vector<std::string>{"0.bias", "0.weight", "1.weight", "steps"});
  CHECK(ckpt.contains("1.weight"));
  CHECK(!ckpt.contains("1.bias"));
  expect_piece(ckpt, "0.weight", w, fio::tensor_piece::whole(w_shape));
  for (index_t r = 0; r < 5; ++r) expect_piece(ckpt, "0.weight", w, fio::tensor_piece::slice(w_shape, 1, r, 5));
  for (index_t r = 0; r < 3; ++r) expect_piece(ckpt, "0.weight", w, fio::tensor_piece::slice(w_shape, 0, r, 3));
  // ZeRO-style ranges of the flattened tensor, across the two saved slices.
  for (const auto& [first, count] : std::vector<std::pair<index_t, index_t>>{{0, 17}, {17, 23}, {40, 20}, {29, 2}})
    expect_piece(ckpt, "0.weight", w, fio::tensor_piece::whole(w_shape).range(first, count));
  // A range of a box: elements 3..11 of the right half.
  expect_piece(ckpt, "0.weight", w, fio::tensor_piece::slice(w_shape, 1, 1, 2).range(3, 9));
  expect_piece(ckpt, "1.weight", h, fio::tensor_piece::whole({4, 6}));
  expect_piece(ckpt, "1.weight", h, fio::tensor_piece::slice({4, 6}, 0, 1, 2));
  expect_piece(ckpt, "0.bias", b, fio::tensor_piece::whole({7}).range(2, 4));
  expect_piece(ckpt, "steps", steps, fio::tensor_piece::whole({}));
}

FUSOR_TEST_CASE("ZeRO ranges of unequal length saved by three ranks read back as slices") {
  const scratch_directory dir("sharded_zero");
  const std::vector<index_t> shape{5, 12};
  const auto m = random_values<double>(60, 11);
  const index_t bounds[] = {0, 13, 41, 60};
  for (int rank = 0; rank < 3; ++rank) {
    fio::shard_writer shard(dir.path, rank, 3, "s");
    const auto piece = fio::tensor_piece::whole(shape).range(bounds[rank], bounds[rank + 1] - bounds[rank]);
    shard.add("optimizer.m", piece, tensor_of(elements_of(m, piece)));
    shard.save();
  }
  fio::write_manifest(dir.path, 3, "s");
  const fio::sharded_checkpoint_reader ckpt(dir.path);
  for (index_t r = 0; r < 4; ++r) expect_piece(ckpt, "optimizer.m", m, fio::tensor_piece::slice(shape, 1, r, 4));
  for (index_t r = 0; r < 5; ++r) expect_piece(ckpt, "optimizer.m", m, fio::tensor_piece::slice(shape, 0, r, 5));
  // Into a 2-D destination: row-major order of its logical shape.
  host_tensor<double, matrix> two_d(5, 12);
  ckpt.read("optimizer.m", fio::tensor_piece::whole(shape), two_d);
  CHECK(std::equal(m.begin(), m.end(), two_d.data()));
}

FUSOR_TEST_CASE("random partitions of a 3-D tensor, saved and read in random boxes and ranges, agree") {
  std::mt19937_64 rng(2026);
  const std::vector<index_t> shape{4, 6, 5};
  const index_t total = 4 * 6 * 5;
  for (int trial = 0; trial < 40; ++trial) {
    INFO("trial ", trial);
    const scratch_directory dir("sharded_random");
    const auto x = random_values<float>(total, 100 + std::uint64_t(trial));
    // Slices along a random axis, each cut into 1 to 3 ranges.
    const int axis = int(rng() % 3);
    const index_t extent = shape[std::size_t(axis)];
    std::vector<index_t> divisors;
    for (index_t d = 1; d <= extent; ++d)
      if (extent % d == 0) divisors.push_back(d);
    const index_t ways = divisors[rng() % divisors.size()];
    std::vector<fio::tensor_piece> pieces;
    for (index_t s = 0; s < ways; ++s) {
      const auto slice = fio::tensor_piece::slice(shape, axis, s, ways);
      const index_t n = slice.box_elements();
      std::vector<index_t> cuts{0, n};
      for (int c = int(rng() % 3); c-- > 0;) cuts.push_back(index_t(rng() % std::uint64_t(n + 1)));
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) pieces.push_back(slice.range(cuts[c], cuts[c + 1] - cuts[c]));
    }
    // Dealt out to 1 to 3 ranks: a rank may hold several pieces of x.
    const int ranks = 1 + int(rng() % std::min<std::uint64_t>(3, pieces.size()));
    for (int r = 0; r < ranks; ++r) {
      fio::shard_writer shard(dir.path, r, ranks, "t" + std::to_string(trial));
      for (std::size_t p = std::size_t(r); p < pieces.size(); p += std::size_t(ranks))
        shard.add("x", pieces[p], tensor_of(elements_of(x, pieces[p])));
      shard.save();
    }
    fio::write_manifest(dir.path, ranks, "t" + std::to_string(trial));
    const fio::sharded_checkpoint_reader ckpt(dir.path);
    for (int q = 0; q < 12; ++q) {
      fio::tensor_piece box = fio::tensor_piece::whole(shape);
      for (std::size_t a = 0; a < 3; ++a) {
        box.begin[a] = index_t(rng() % std::uint64_t(shape[a]));
        box.shape[a] = 1 + index_t(rng() % std::uint64_t(shape[a] - box.begin[a]));
      }
      const index_t n = box.box_elements();
      const index_t first = index_t(rng() % std::uint64_t(n));
      expect_piece(ckpt, "x", x, q % 2 ? box : box.range(first, 1 + index_t(rng() % std::uint64_t(n - first))));
    }
  }
}

FUSOR_TEST_CASE("sharded checkpoints refuse unfinished saves, missing or overlapping pieces and other saves' shards") {
  const scratch_directory dir("sharded_errors");
  const std::vector<index_t> shape{4, 4};
  const auto w = random_values<float>(16, 21);
  auto save_rank = [&](int rank, const std::string& id, const fio::tensor_piece& piece) {
    fio::shard_writer shard(dir.path, rank, 2, id);
    shard.add("w", piece, tensor_of(elements_of(w, piece)));
    shard.save();
  };
  const auto top = fio::tensor_piece::slice(shape, 0, 0, 2), bottom = fio::tensor_piece::slice(shape, 0, 1, 2);

  save_rank(0, "a", top);
  expect_error<fio::checkpoint_error>([&] { fio::sharded_checkpoint_reader ckpt(dir.path); },
                                      {"manifest.safetensors", "its save did not finish"});
  expect_error<fio::checkpoint_error>([&] { fio::write_manifest(dir.path, 2, "a"); },
                                      {"rank 1 has not saved its shard", "shard-00001-of-00002.index"});
  save_rank(1, "a", top);  // the same rows again
  expect_error<fio::checkpoint_error>([&] { fio::write_manifest(dir.path, 2, "a"); },
                                      {"tensor 'w' is saved twice", "rank 0", "rank 1", "one rank only"});
  save_rank(1, "a", bottom.range(0, 5));  // 13 of 16 elements
  expect_error<fio::checkpoint_error>([&] { fio::write_manifest(dir.path, 2, "a"); },
                                      {"tensor 'w' of shape [4, 4] has 16 elements", "hold 13 of them"});
  save_rank(1, "b", bottom);
  expect_error<fio::checkpoint_error>([&] { fio::write_manifest(dir.path, 2, "a"); }, {"belongs to save 'b', not 'a'"});
  expect_error<fio::checkpoint_error>([&] { fio::write_manifest(dir.path, 2, "b", {{"fusor.step", "1"}}); },
                                      {"'fusor.' are reserved", "fusor.step"});
  save_rank(1, "a", bottom);
  fio::write_manifest(dir.path, 2, "a");
  const fio::sharded_checkpoint_reader ckpt(dir.path);
  expect_piece(ckpt, "w", w, fio::tensor_piece::whole(shape));

  host_tensor<double, flat> wrong_type(16);
  expect_error<fio::checkpoint_error>([&] { ckpt.read("w", fio::tensor_piece::whole(shape), wrong_type); },
                                      {"tensor 'w' is stored as F32", "destination holds F64"});
  host_tensor<float, flat> eight(8), sixteen(16);
  expect_error<fio::checkpoint_error>([&] { ckpt.read("w", fio::tensor_piece::whole({2, 8}), sixteen); },
                                      {"tensor 'w' has shape [4, 4]", "tensor of shape [2, 8]"});
  expect_error<fusor::shape_error>([&] { ckpt.read("w", fio::tensor_piece::whole(shape), eight); },
                                   {"holds 16 elements, the destination 8"});
  expect_error<fio::checkpoint_error>([&] { ckpt.read("v", fio::tensor_piece::whole(shape), sixteen); },
                                      {"has no tensor 'v'"});
  expect_error<fusor::shape_error>([&] { (void)fio::tensor_piece::slice(shape, 1, 0, 3); },
                                   {"slice 0 of 3 along axis 1 of shape [4, 4]"});

  // A later save into the same folder that crashed after rank 1 wrote its shard.
  save_rank(1, "c", bottom);
  const fio::sharded_checkpoint_reader stale(dir.path);
  expect_error<fio::checkpoint_error>([&] { stale.read("w", fio::tensor_piece::whole(shape), sixteen); },
                                      {"shard-00001-of-00002.safetensors", "belongs to save 'c'", "manifest to 'a'"});

  // Rank 1's shard of save 'a' again, then one bit of its last value flipped: the size is the same, the content
  // hash is not, and the shard is refused rather than loaded.
  save_rank(1, "a", bottom);
  expect_piece(fio::sharded_checkpoint_reader(dir.path), "w", w, fio::tensor_piece::whole(shape));
  const auto shard = dir.path / "shard-00001-of-00002.safetensors";
  std::vector<std::byte> bytes = fio::read_file(shard);
  bytes.back() ^= std::byte{0x10};
  fio::write_file_atomically(shard, bytes);
  const fio::sharded_checkpoint_reader damaged(dir.path);
  expect_error<fio::checkpoint_error>([&] { damaged.read("w", fio::tensor_piece::whole(shape), sixteen); },
                                      {"shard-00001-of-00002.safetensors' does not hold what was saved",
                                       "content hash", "damaged on disk or in a copy"});
}

TEST_CASE("content_hash: any one flipped bit changes it, and so does the length") {
  std::vector<std::byte> bytes(37);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 7 + 3);
  const std::uint64_t hash = fio::content_hash(bytes);
  CHECK(fio::content_hash(bytes) == hash);
  CHECK(fio::content_hash_text(hash).size() == 16);
  int unchanged = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] ^= std::byte(1 << bit);
      unchanged += fio::content_hash(bytes) == hash;
      bytes[i] ^= std::byte(1 << bit);
    }
  CHECK(unchanged == 0);
  bytes.push_back(std::byte{0});  // a zero byte more: the same words, another length
  CHECK(fio::content_hash(bytes) != hash);
  CHECK(fio::content_hash(std::span<const std::byte>()) != fio::content_hash(std::vector<std::byte>(8)));
}
