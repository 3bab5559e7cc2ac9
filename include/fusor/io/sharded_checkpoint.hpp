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
//   world.all_reduce(saved, comm::reduction_op::sum).wait();  // the caller's barrier: every shard saved
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
// later save into the same folder) is refused rather than mixed in; the
// manifest records each shard's size and content hash (io/content_hash.hpp),
// so a shard damaged after the save is refused, naming it, not loaded.
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
#include "fusor/io/content_hash.hpp"

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
  static tensor_piece slice(std::vector<index_t> global_shape, int axis, index_t index, index_t ways);
  /// Elements [first, first + count) of this piece's box, row-major (a ZeRO shard). Throws shape_error when
  /// they do not lie inside the box.
  tensor_piece range(index_t first_element, index_t element_count) const;

  /// The number of elements in the box.
  index_t box_elements() const {
    index_t n = 1;
    for (const index_t e : shape) n *= e;
    return n;
  }
  /// The number of elements in the piece: `count`, or the whole box's.
  index_t elements() const { return count < 0 ? box_elements() : count; }

  /// Throws shape_error unless the box lies inside the tensor and the range inside the box.
  void check(const std::string& what) const;
};

namespace detail {

FUSOR_DECL std::string shard_stem(int rank, int ranks);
inline constexpr const char* manifest_name = "manifest.safetensors";
inline constexpr const char* sharded_format = "fusor sharded checkpoint 1";

// "global=6,10 begin=0,0 shape=3,10 first=0 count=30 dtype=F32" and back.
FUSOR_DECL std::string join(const std::vector<index_t>& v);
FUSOR_DECL std::string place_text(const tensor_piece& p, dtype type);
struct parsed_place {
  tensor_piece piece;
  dtype type = dtype::f32;
  std::string record;  // the shard's safetensors record holding the values
};
FUSOR_DECL parsed_place parse_place(std::string_view text, const std::string& where);

// Row-major position of `index` in a box of `shape`.
inline index_t row_major_offset(const std::vector<index_t>& index, const std::vector<index_t>& shape) {
  index_t offset = 0;
  for (std::size_t a = 0; a < shape.size(); ++a) offset = offset * shape[a] + index[a];
  return offset;
}

// Whether boxes a and b share an element.
FUSOR_DECL bool boxes_meet(const tensor_piece& a, const tensor_piece& b);

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
  shard_writer(std::filesystem::path directory, int rank, int ranks, std::string save_id);

  /// Copies `values` (a view or tensor of any space and layout holding
  /// place.elements() elements, read in row-major order) as this rank's piece of
  /// `name` (a rank may add several pieces of one tensor).
  template <class View>
  void add(const std::string& name, const tensor_piece& place, const View& values) {
    const auto& view = as_view(values);
    using view_t = std::remove_cvref_t<decltype(view)>;
    check_piece(name, place, index_t(view.size()), detail::shape_of(view));
    add_piece(name, place, dtype_of<typename view_t::element_type>(), detail::row_major_bytes(view, name));
  }

  /// Writes this rank's shard and index, each atomically (the directory is made if missing).
  void save() const;

 private:
  // Refuses a bad name, a bad place, or values of another element count than the place's.
  void check_piece(const std::string& name, const tensor_piece& place, index_t elements,
                   const std::vector<index_t>& shape) const;
  // Records the piece's bytes and where it lies.
  void add_piece(const std::string& name, const tensor_piece& place, dtype type, std::vector<std::byte> bytes);

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
FUSOR_DECL void write_manifest(const std::filesystem::path& directory, int ranks, const std::string& save_id,
                           const std::map<std::string, std::string>& metadata = {});

/// A finished sharded checkpoint, read in any pieces.
class sharded_checkpoint_reader {
 public:
  /// Reads the manifest of the checkpoint in `directory` (the shards are read when first needed). Throws
  /// checkpoint_error when there is no manifest (the save did not finish) or it is not valid.
  explicit sharded_checkpoint_reader(std::filesystem::path directory);

  /// The number of ranks, and of shards, that saved it.
  int ranks() const { return ranks_; }
  /// The id every file of the save carries.
  const std::string& save_id() const { return save_id_; }
  /// Whether the checkpoint holds a tensor named `name`.
  bool contains(const std::string& name) const { return pieces_.count(name) != 0; }
  /// The names of every tensor the checkpoint holds, sorted (the same on every rank: from the manifest).
  std::vector<std::string> names() const {
    std::vector<std::string> all;
    for (const auto& entry : pieces_) all.push_back(entry.first);
    return all;
  }
  /// The whole shape of tensor `name`; throws checkpoint_error when there is no such tensor.
  const std::vector<index_t>& global_shape(const std::string& name) const { return find(name).front().place.piece.global_shape; }
  /// The save's own metadata (write_manifest's `metadata`); throws naming the key.
  const std::string& metadata(const std::string& key) const;

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
    detail::store_row_major(view, gather(name, place, dtype_of<typename view_t::element_type>(), index_t(view.size())),
                            name);
  }
  /// What read(name, place, destination) would copy (the piece's elements in row-major order, as a rank-1
  /// record), after the same checks, copying nothing: to check a whole set of pieces before any destination
  /// changes.
  template <class View>
  tensor_record check(const std::string& name, const tensor_piece& place, const View& destination) const {
    place.check("sharded_checkpoint_reader::check('" + name + "')");
    const auto& view = as_view(destination);
    using view_t = std::remove_cvref_t<decltype(view)>;
    const dtype type = dtype_of<typename view_t::element_type>();
    return {name, type, {index_t(view.size())}, gather(name, place, type, index_t(view.size()))};
  }

 private:
  struct held {
    int shard;
    detail::parsed_place place;
  };
  // The bytes of piece `place` of tensor `name` in row-major order, gathered from the shards that hold it, for a
  // destination of `destination_elements` elements of `wanted`; every mismatch is a checkpoint_error.
  std::vector<std::byte> gather(const std::string& name, const tensor_piece& place, dtype wanted,
                                index_t destination_elements) const;
  static index_t parse_count(const std::string& text, const std::filesystem::path& file, const std::string& key);
  const std::vector<held>& find(const std::string& name) const;
  // Shard r's record `name`, the shard read (and checked against the manifest) once.
  const tensor_record& shard_tensor(int r, const std::string& name) const;

  std::filesystem::path directory_;
  std::string save_id_;
  int ranks_ = 0;
  std::map<std::string, std::vector<held>> pieces_;
  std::map<std::string, std::string> metadata_;
  std::vector<index_t> shard_bytes_;
  std::vector<std::string> shard_hashes_;  // io::content_hash_text of each shard; empty where not recorded
  mutable std::map<int, std::unique_ptr<checkpoint_reader>> shards_;
};

}  // namespace fusor::io

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/io/impl/sharded_checkpoint.ipp"
#endif
