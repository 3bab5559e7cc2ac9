// fusor/io/sharded_checkpoint.hpp — a checkpoint written by many ranks, each
// its own part, and read back by any number of ranks cut any other way.
//
// Each rank saves the pieces of tensors it holds (a tensor-parallel slice, a
// pipeline stage's layers, a ZeRO shard of optimizer state) to its own shard;
// once every rank has saved (the caller's barrier), one rank writes the
// manifest, which names every piece of every tensor and is written last: a
// directory without a manifest is a save that did not finish, and is refused.
//
//   io::shard_writer shard(dir, rank, ranks, "step-1200");     // every rank
//   shard.add("3.weight", io::tensor_piece::slice({512, 784}, 0, tp_rank, tp_ways), w);
//   shard.save();                                              // shard-00002-of-00008.safetensors, .index
//   communicator.barrier();
//   if (rank == 0) io::write_manifest(dir, ranks, "step-1200", {{"step", "1200"}});
//   ...
//   io::sharded_checkpoint_reader ckpt(dir);                   // any number of ranks, any split
//   ckpt.read("3.weight", io::tensor_piece::slice({512, 784}, 1, r, 4), w);
//
// A piece is a box of the whole tensor (an origin and extents per axis) and,
// within it, a range of its elements in row-major order: a box alone for a
// tensor-parallel slice, a range of one for a ZeRO shard of a flattened
// tensor. Pieces of one tensor must not overlap and must cover it; the
// manifest writer checks both, so replicated tensors are saved by one rank.
// read() assembles the destination piece from whichever saved pieces overlap
// it, row by row, and says which elements no shard holds.
//
// Files: each shard is a safetensors file of the pieces' values (dtype as
// stored, 1-D, under the tensor's name; a rank's further pieces of the same
// tensor, such as the parts of a GPT's qkv slice, as name#1, name#2, ...),
// written atomically (io/file.hpp);
// beside it a small index (safetensors, metadata only) of where each piece
// lies, which the manifest writer reads instead of the shards. Every file of
// one save carries the save's id, so a shard of another save (a crashed
// later save into the same folder) is refused rather than mixed in.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fusor/io/checkpoint.hpp"

namespace fusor::io {

/// Where a piece lies in its whole tensor.
struct tensor_piece {
  std::vector<index_t> global_shape;  ///< The whole tensor's shape
  std::vector<index_t> begin;         ///< The box's origin, per axis
  std::vector<index_t> shape;         ///< The box's extents, per axis
  index_t first = 0;                  ///< The piece: box elements [first, first + count), row-major
  index_t count = -1;                 ///< The number of elements; -1: the whole box

  /// The whole of a tensor of `shape`.
  static tensor_piece whole(std::vector<index_t> shape) {
    return {shape, std::vector<index_t>(shape.size(), 0), shape, 0, -1};
  }
  /// Slice `index` of `ways` equal slices along `axis` (tensor parallelism). Throws shape_error unless the
  /// axis exists and its extent divides by `ways`.
  static tensor_piece slice(std::vector<index_t> global_shape, int axis, index_t index, index_t ways) {
    if (axis < 0 || std::size_t(axis) >= global_shape.size() || ways < 1 || index < 0 || index >= ways ||
        global_shape[std::size_t(axis)] % ways != 0)
      throw shape_error("fusor: tensor_piece::slice: slice " + std::to_string(index) + " of " + std::to_string(ways) +
                        " along axis " + std::to_string(axis) + " of shape " + shape_text(global_shape) +
                        " (the axis must exist and its extent divide by the number of slices)");
    tensor_piece p = whole(std::move(global_shape));
    const index_t width = p.global_shape[std::size_t(axis)] / ways;
    p.begin[std::size_t(axis)] = index * width;
    p.shape[std::size_t(axis)] = width;
    return p;
  }
  /// Elements [first, first + count) of this piece's box, row-major (a ZeRO shard). Throws shape_error when
  /// they do not lie inside the box.
  tensor_piece range(index_t first_element, index_t element_count) const {
    tensor_piece p = *this;
    p.first = first_element;
    p.count = element_count;
    p.check("tensor_piece::range");
    return p;
  }

  /// The number of elements in the box.
  index_t box_elements() const {
    index_t n = 1;
    for (const index_t e : shape) n *= e;
    return n;
  }
  /// The number of elements in the piece: `count`, or the whole box's.
  index_t elements() const { return count < 0 ? box_elements() : count; }

  /// Throws shape_error unless the box lies inside the tensor and the range inside the box.
  void check(const std::string& what) const {
    bool ok = begin.size() == global_shape.size() && shape.size() == global_shape.size() && first >= 0;
    for (std::size_t a = 0; ok && a < shape.size(); ++a)
      ok = begin[a] >= 0 && shape[a] >= 0 && begin[a] + shape[a] <= global_shape[a];
    if (ok && count >= 0) ok = first + count <= box_elements();
    if (!ok)
      throw shape_error("fusor: " + what + ": the piece at " + shape_text(begin) + " of extents " + shape_text(shape) +
                        ", elements " + std::to_string(first) + " + " + std::to_string(count) +
                        ", does not lie inside a tensor of shape " + shape_text(global_shape));
  }
};

namespace detail {

inline std::string shard_stem(int rank, int ranks) {
  auto five = [](int n) {
    std::string s = std::to_string(n);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  return "shard-" + five(rank) + "-of-" + five(ranks);
}
inline constexpr const char* manifest_name = "manifest.safetensors";
inline constexpr const char* sharded_format = "fusor sharded checkpoint 1";

// "global=6,10 begin=0,0 shape=3,10 first=0 count=30 dtype=F32" and back.
inline std::string join(const std::vector<index_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}
inline std::string place_text(const tensor_piece& p, dtype type) {
  return "global=" + join(p.global_shape) + " begin=" + join(p.begin) + " shape=" + join(p.shape) +
         " first=" + std::to_string(p.first) + " count=" + std::to_string(p.elements()) + " dtype=" + dtype_name(type);
}
struct parsed_place {
  tensor_piece piece;
  dtype type = dtype::f32;
  std::string record;  // the shard's safetensors record holding the values
};
inline parsed_place parse_place(std::string_view text, const std::string& where) {
  const auto fail = [&](const std::string& why) -> void {
    throw checkpoint_error("fusor: " + where + ": the piece description '" + std::string(text) + "' " + why);
  };
  auto numbers = [&](std::string_view list) {
    std::vector<index_t> out;
    while (!list.empty()) {
      const std::size_t comma = list.find(',');
      const std::string_view item = list.substr(0, comma);
      index_t n = 0;
      const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), n);
      if (error != std::errc{} || end != item.data() + item.size() || n < 0) fail("holds a bad number '" + std::string(item) + "'");
      out.push_back(n);
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    }
    return out;
  };
  parsed_place p;
  int seen = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t space = rest.find(' ');
    const std::string_view field = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view{} : rest.substr(space + 1);
    const std::size_t equals = field.find('=');
    if (equals == std::string_view::npos) fail("has a field without '='");
    const std::string_view key = field.substr(0, equals), value = field.substr(equals + 1);
    if (key == "global") p.piece.global_shape = numbers(value), seen |= 1;
    else if (key == "begin") p.piece.begin = numbers(value), seen |= 2;
    else if (key == "shape") p.piece.shape = numbers(value), seen |= 4;
    else if (key == "first" || key == "count") {
      const auto n = numbers(value);
      if (n.size() != 1) fail("has a bad '" + std::string(key) + "'");
      (key == "first" ? p.piece.first : p.piece.count) = n[0];
      seen |= key == "first" ? 8 : 16;
    } else if (key == "record") {
      if (value.empty()) fail("has an empty record name");
      p.record = std::string(value);
    } else if (key == "dtype") {
      const auto t = dtype_from_name(value);
      if (!t) fail("names the unknown dtype '" + std::string(value) + "'");
      p.type = *t;
      seen |= 32;
    } else {
      fail("has the unknown field '" + std::string(key) + "'");
    }
  }
  if (seen != 63 || p.record.empty()) fail("lacks one of global, begin, shape, first, count, dtype, record");
  try {
    p.piece.check("piece");
  } catch (const shape_error& e) {
    fail(std::string("is inconsistent: ") + e.what());
  }
  return p;
}

// Row-major position of `index` in a box of `shape`.
inline index_t row_major_offset(const std::vector<index_t>& index, const std::vector<index_t>& shape) {
  index_t offset = 0;
  for (std::size_t a = 0; a < shape.size(); ++a) offset = offset * shape[a] + index[a];
  return offset;
}

// Whether boxes a and b share an element.
inline bool boxes_meet(const tensor_piece& a, const tensor_piece& b) {
  for (std::size_t d = 0; d < a.shape.size(); ++d)
    if (std::max(a.begin[d], b.begin[d]) >= std::min(a.begin[d] + a.shape[d], b.begin[d] + b.shape[d])) return false;
  return true;
}

// For each run of consecutive elements along the last axis of `to`'s range:
// run(global index of its first element, its position in `to`'s range, its length).
template <class Run>
void for_each_row_run(const tensor_piece& to, Run&& run) {
  const std::size_t rank = to.shape.size();
  const index_t total = to.elements();
  if (rank == 0) {
    if (total > 0) run(std::vector<index_t>{}, index_t(0), index_t(1));
    return;
  }
  const index_t row = to.shape[rank - 1];
  std::vector<index_t> local(rank, 0), global(rank, 0);
  for (index_t done = 0; done < total;) {
    index_t at = to.first + done;  // position in the box
    for (std::size_t a = rank; a-- > 0;) {
      local[a] = to.shape[a] == 0 ? 0 : at % to.shape[a];
      at = to.shape[a] == 0 ? 0 : at / to.shape[a];
    }
    for (std::size_t a = 0; a < rank; ++a) global[a] = to.begin[a] + local[a];
    const index_t length = std::min(row - local[rank - 1], total - done);
    run(global, done, length);
    done += length;
  }
}

}  // namespace detail

/// One rank's part of a sharded checkpoint.
class shard_writer {
 public:
  /// Rank `rank` of `ranks`, saving into `directory` under `save_id` (a non-empty word that every rank and
  /// write_manifest() share). Throws checkpoint_error for a bad rank or id.
  shard_writer(std::filesystem::path directory, int rank, int ranks, std::string save_id)
      : directory_(std::move(directory)), rank_(rank), ranks_(ranks), save_id_(std::move(save_id)) {
    if (ranks < 1 || rank < 0 || rank >= ranks)
      throw checkpoint_error("fusor: shard_writer: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                             " ranks (0 <= rank < ranks)");
    if (save_id_.empty() || save_id_.find(' ') != std::string::npos)
      throw checkpoint_error("fusor: shard_writer: the save id must be a non-empty word, not '" + save_id_ + "'");
    data_.add_metadata("fusor.save", save_id_);
    index_.add_metadata("fusor.save", save_id_);
  }

  /// Copies `values` (a view or tensor of any space and layout holding
  /// place.elements() elements, read in row-major order) as this rank's piece of
  /// `name` (a rank may add several pieces of one tensor).
  template <class View>
  void add(const std::string& name, const tensor_piece& place, const View& values) {
    if (name.empty() || name.find_first_of(" #") != std::string::npos)
      throw checkpoint_error("fusor: shard_writer::add: the tensor name '" + name +
                             "' must be non-empty, without spaces or '#'");
    place.check("shard_writer::add('" + name + "')");
    const auto& view = as_view(values);
    using view_t = std::remove_cvref_t<decltype(view)>;
    if (index_t(view.size()) != place.elements())
      throw shape_error("fusor: shard_writer::add('" + name + "'): the piece holds " + std::to_string(place.elements()) +
                        " elements, the values " + std::to_string(view.size()) + " (shape " +
                        shape_text(detail::shape_of(view)) + ")");
    constexpr dtype type = dtype_of<typename view_t::element_type>();
    const int k = pieces_[name]++;
    const std::string record = k == 0 ? name : name + "#" + std::to_string(k);
    data_.add_record({record, type, {place.elements()}, detail::row_major_bytes(view, name)});
    index_.add_metadata("fusor.piece/" + name + "/" + std::to_string(k), detail::place_text(place, type) + " record=" + record);
  }

  /// Writes this rank's shard and index, each atomically (the directory is made if missing).
  void save() const {
    std::filesystem::create_directories(directory_);
    const std::string stem = detail::shard_stem(rank_, ranks_);
    data_.save(directory_ / (stem + ".safetensors"));
    checkpoint_writer index = index_;  // metadata only: cheap to copy
    index.add_metadata("fusor.shard_bytes",
                       std::to_string(std::filesystem::file_size(directory_ / (stem + ".safetensors"))));
    index.save(directory_ / (stem + ".index"));
  }

 private:
  std::filesystem::path directory_;
  int rank_, ranks_;
  std::string save_id_;
  checkpoint_writer data_, index_;
  std::map<std::string, int> pieces_;  // pieces added per tensor
};

/// After every rank's shard_writer::save() (a barrier between): reads the
/// ranks' indexes, checks that the pieces of each tensor agree on its dtype
/// and shape, do not overlap and cover it, and writes the manifest, last and
/// atomically. `metadata` (step, mesh, data position: strings) is the save's
/// own; keys starting "fusor." are reserved.
inline void write_manifest(const std::filesystem::path& directory, int ranks, const std::string& save_id,
                           const std::map<std::string, std::string>& metadata = {}) {
  struct held {
    int shard;
    detail::parsed_place place;
  };
  std::map<std::string, std::vector<held>> tensors;
  checkpoint_writer manifest;
  for (const auto& [k, v] : metadata) {
    if (k.rfind("fusor.", 0) == 0)
      throw checkpoint_error("fusor: write_manifest: metadata keys starting 'fusor.' are reserved ('" + k + "')");
    manifest.add_metadata(k, v);
  }
  for (int r = 0; r < ranks; ++r) {
    const auto index_file = directory / (detail::shard_stem(r, ranks) + ".index");
    if (!std::filesystem::exists(index_file))
      throw checkpoint_error("fusor: write_manifest: rank " + std::to_string(r) + " has not saved its shard ('" +
                             index_file.string() + "' is missing): call it after every rank's shard_writer::save()");
    const checkpoint_reader index(index_file);
    if (index.metadata("fusor.save") != save_id)
      throw checkpoint_error("fusor: write_manifest: '" + index_file.string() + "' belongs to save '" +
                             index.metadata("fusor.save") + "', not '" + save_id + "'");
    manifest.add_metadata("fusor.shard_bytes/" + std::to_string(r), index.metadata("fusor.shard_bytes"));
    for (const auto& [key, text] : index.contents().metadata) {
      if (key.rfind("fusor.piece/", 0) != 0) continue;
      const std::string name = key.substr(12, key.rfind('/') - 12);
      const std::string where = std::string("'").append(index_file.string()).append("', tensor '").append(name).append("'");
      tensors[name].push_back({r, detail::parse_place(text, where)});
    }
  }
  for (const auto& [name, pieces] : tensors) {
    index_t covered = 0;
    const tensor_piece& first = pieces.front().place.piece;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const auto& [shard, place] = pieces[i];
      const auto where = [&](const held& h) { return "rank " + std::to_string(h.shard) + "'s piece at " + shape_text(h.place.piece.begin); };
      if (place.piece.global_shape != first.global_shape || place.type != pieces.front().place.type)
        throw checkpoint_error("fusor: write_manifest: tensor '" + name + "' is " + dtype_name(place.type) + " " +
                               shape_text(place.piece.global_shape) + " in " + where(pieces[i]) + " but " +
                               dtype_name(pieces.front().place.type) + " " + shape_text(first.global_shape) + " in " +
                               where(pieces.front()));
      for (std::size_t j = 0; j < i; ++j) {
        const tensor_piece& other = pieces[j].place.piece;
        const bool same_box = other.begin == place.piece.begin && other.shape == place.piece.shape;
        const bool overlap =
            same_box ? std::max(other.first, place.piece.first) <
                           std::min(other.first + other.elements(), place.piece.first + place.piece.elements())
                     : detail::boxes_meet(other, place.piece);
        if (overlap)
          throw checkpoint_error("fusor: write_manifest: tensor '" + name + "' is saved twice: " + where(pieces[j]) +
                                 " and " + where(pieces[i]) +
                                 " overlap (a replicated tensor must be added by one rank only)");
      }
      covered += place.piece.elements();
      manifest.add_metadata("fusor.piece/" + name + "/" + std::to_string(i), "shard=" + std::to_string(shard) + " " +
                                                                          detail::place_text(place.piece, place.type) +
                                                                          " record=" + place.record);
    }
    const index_t total = tensor_piece::whole(first.global_shape).box_elements();
    if (covered != total)
      throw checkpoint_error("fusor: write_manifest: tensor '" + name + "' of shape " + shape_text(first.global_shape) +
                             " has " + std::to_string(total) + " elements, but the shards hold " +
                             std::to_string(covered) + " of them");
  }
  manifest.add_metadata("fusor.format", detail::sharded_format);
  manifest.add_metadata("fusor.save", save_id);
  manifest.add_metadata("fusor.ranks", std::to_string(ranks));
  manifest.save(directory / detail::manifest_name);
}

/// A finished sharded checkpoint, read in any pieces.
class sharded_checkpoint_reader {
 public:
  /// Reads the manifest of the checkpoint in `directory` (the shards are read when first needed). Throws
  /// checkpoint_error when there is no manifest (the save did not finish) or it is not valid.
  explicit sharded_checkpoint_reader(std::filesystem::path directory) : directory_(std::move(directory)) {
    const auto file = directory_ / detail::manifest_name;
    if (!std::filesystem::exists(file))
      throw checkpoint_error("fusor: '" + directory_.string() + "' has no " + detail::manifest_name +
                             ": it is not a sharded checkpoint, or its save did not finish");
    const checkpoint_reader manifest(file);
    if (manifest.metadata("fusor.format") != detail::sharded_format)
      throw checkpoint_error("fusor: '" + file.string() + "' is in the format '" + manifest.metadata("fusor.format") +
                             "', not '" + detail::sharded_format + "'");
    save_id_ = manifest.metadata("fusor.save");
    ranks_ = parse_count(manifest.metadata("fusor.ranks"), file, "fusor.ranks");
    for (const auto& [key, text] : manifest.contents().metadata) {
      if (key.rfind("fusor.piece/", 0) == 0) {
        const std::size_t slash = key.rfind('/');
        const std::string name = key.substr(12, slash - 12);
        const std::size_t space = text.find(' ');
        if (text.rfind("shard=", 0) != 0 || space == std::string::npos)
          throw checkpoint_error("fusor: '" + file.string() + "': metadata '" + key + "' does not start with shard=N");
        const int shard = int(parse_count(text.substr(6, space - 6), file, key));
        if (shard >= ranks_)
          throw checkpoint_error("fusor: '" + file.string() + "': metadata '" + key + "' names shard " +
                                 std::to_string(shard) + " of " + std::to_string(ranks_));
        pieces_[name].push_back({shard, detail::parse_place(text.substr(space + 1), "'" + file.string() + "', '" + key + "'")});
      } else if (key.rfind("fusor.", 0) != 0) {
        metadata_[key] = text;
      }
    }
    for (int r = 0; r < ranks_; ++r)
      shard_bytes_.push_back(parse_count(manifest.metadata("fusor.shard_bytes/" + std::to_string(r)), file, "shard bytes"));
  }

  /// The number of ranks, and of shards, that saved it.
  int ranks() const { return ranks_; }
  /// The id every file of the save carries.
  const std::string& save_id() const { return save_id_; }
  /// Whether the checkpoint holds a tensor named `name`.
  bool contains(const std::string& name) const { return pieces_.count(name) != 0; }
  /// The whole shape of tensor `name`; throws checkpoint_error when there is no such tensor.
  const std::vector<index_t>& global_shape(const std::string& name) const { return find(name).front().place.piece.global_shape; }
  /// The save's own metadata (write_manifest's `metadata`); throws naming the key.
  const std::string& metadata(const std::string& key) const {
    const auto it = metadata_.find(key);
    if (it == metadata_.end())
      throw checkpoint_error("fusor: sharded checkpoint '" + directory_.string() + "' has no metadata '" + key + "'");
    return it->second;
  }

  /// All of the save's own metadata.
  const std::map<std::string, std::string>& all_metadata() const { return metadata_; }

  /// Fills `destination` (place.elements() elements, any space and layout,
  /// written in row-major order) with piece `place` of tensor `name`, from
  /// whichever saved pieces hold it. Throws checkpoint_error when the dtype or shape differs or the
  /// shards do not hold every element asked for.
  template <class View>
  void read(const std::string& name, const tensor_piece& place, const View& destination) const {
    place.check("sharded_checkpoint_reader::read('" + name + "')");
    const auto& view = as_view(destination);
    using view_t = std::remove_cvref_t<decltype(view)>;
    const auto& saved = find(name);
    const std::string what = "sharded checkpoint '" + directory_.string() + "': tensor '" + name + "'";
    constexpr dtype wanted = dtype_of<typename view_t::element_type>();
    if (saved.front().place.type != wanted)
      throw checkpoint_error("fusor: " + what + " is stored as " + dtype_name(saved.front().place.type) +
                             ", but the destination holds " + dtype_name(wanted));
    if (saved.front().place.piece.global_shape != place.global_shape)
      throw checkpoint_error("fusor: " + what + " has shape " + shape_text(saved.front().place.piece.global_shape) +
                             ", but the piece asked for is of a tensor of shape " + shape_text(place.global_shape));
    if (index_t(view.size()) != place.elements())
      throw shape_error("fusor: " + what + ": the piece asked for holds " + std::to_string(place.elements()) +
                        " elements, the destination " + std::to_string(view.size()));
    const std::size_t size = dtype_size(wanted);
    std::vector<std::byte> out(std::size_t(place.elements()) * size);
    index_t filled = 0;
    for (const auto& [shard, source] : saved) {
      const tensor_piece& from = source.piece;
      if (!detail::boxes_meet(from, place)) continue;
      const tensor_record& record = shard_tensor(shard, source.record);
      if (record.type != source.type || record.bytes.size() != std::size_t(from.elements()) * size)
        throw checkpoint_error("fusor: " + what + ": shard " + std::to_string(shard) + "'s record '" + source.record +
                               "' holds " + std::to_string(record.bytes.size()) + " bytes of " + dtype_name(record.type) +
                               ", but its index says " + std::to_string(from.elements()) + " elements of " +
                               dtype_name(source.type));
      const std::vector<std::byte>& bytes = record.bytes;
      const std::size_t last = from.shape.size() - 1;
      detail::for_each_row_run(place, [&](const std::vector<index_t>& global, index_t at, index_t length) {
        if (from.shape.empty()) {  // a scalar
          std::memcpy(out.data(), bytes.data(), size), filled += 1;
          return;
        }
        for (std::size_t a = 0; a < last; ++a)
          if (global[a] < from.begin[a] || global[a] >= from.begin[a] + from.shape[a]) return;
        index_t lo = std::max(global[last], from.begin[last]);
        index_t hi = std::min(global[last] + length, from.begin[last] + from.shape[last]);
        if (lo >= hi) return;
        std::vector<index_t> local(global.size());
        for (std::size_t a = 0; a < global.size(); ++a) local[a] = global[a] - from.begin[a];
        local[last] = lo - from.begin[last];
        index_t position = detail::row_major_offset(local, from.shape);  // in the saved box
        // Keep what lies in the saved piece's range of its box.
        const index_t skip_front = std::max<index_t>(0, from.first - position);
        const index_t end = std::min(position + (hi - lo), from.first + from.elements());
        if (position + skip_front >= end) return;
        lo += skip_front, position += skip_front;
        const index_t n = end - position;
        std::memcpy(out.data() + std::size_t(at + (lo - global[last])) * size,
                    bytes.data() + std::size_t(position - from.first) * size, std::size_t(n) * size);
        filled += n;
      });
    }
    if (filled != place.elements())
      throw checkpoint_error("fusor: " + what + ": the shards hold " + std::to_string(filled) + " of the " +
                             std::to_string(place.elements()) + " elements of the piece at " + shape_text(place.begin) +
                             " of extents " + shape_text(place.shape));
    detail::store_row_major(view, out, name);
  }

 private:
  struct held {
    int shard;
    detail::parsed_place place;
  };
  static index_t parse_count(const std::string& text, const std::filesystem::path& file, const std::string& key) {
    index_t n = -1;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (error != std::errc{} || end != text.data() + text.size() || n < 0)
      throw checkpoint_error("fusor: '" + file.string() + "': '" + key + "' is '" + text + "', not a count");
    return n;
  }
  const std::vector<held>& find(const std::string& name) const {
    const auto it = pieces_.find(name);
    if (it == pieces_.end())
      throw checkpoint_error("fusor: sharded checkpoint '" + directory_.string() + "' has no tensor '" + name + "'");
    return it->second;
  }
  // Shard r's record `name`, the shard read (and checked against the manifest) once.
  const tensor_record& shard_tensor(int r, const std::string& name) const {
    auto& reader = shards_[r];
    if (!reader) {
      const auto file = directory_ / (detail::shard_stem(r, ranks_) + ".safetensors");
      if (!std::filesystem::exists(file))
        throw checkpoint_error("fusor: sharded checkpoint '" + directory_.string() + "': shard '" + file.string() +
                               "' is missing");
      if (index_t(std::filesystem::file_size(file)) != shard_bytes_[std::size_t(r)])
        throw checkpoint_error("fusor: shard '" + file.string() + "' is " + std::to_string(std::filesystem::file_size(file)) +
                               " bytes, but the manifest recorded " + std::to_string(shard_bytes_[std::size_t(r)]) +
                               ": it was written by another save");
      reader = std::make_unique<checkpoint_reader>(file);
      if (reader->metadata("fusor.save") != save_id_)
        throw checkpoint_error("fusor: shard '" + file.string() + "' belongs to save '" + reader->metadata("fusor.save") +
                               "', the manifest to '" + save_id_ + "'");
    }
    return reader->contents().at(name);
  }

  std::filesystem::path directory_;
  std::string save_id_;
  int ranks_ = 0;
  std::map<std::string, std::vector<held>> pieces_;
  std::map<std::string, std::string> metadata_;
  std::vector<index_t> shard_bytes_;
  mutable std::map<int, std::unique_ptr<checkpoint_reader>> shards_;
};

}  // namespace fusor::io
