// fusor/io/impl/sharded_checkpoint.ipp — definitions of fusor/io/sharded_checkpoint.hpp's non-template functions
// (see FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/io/sharded_checkpoint.hpp"

namespace fusor::io {

FUSOR_DECL tensor_piece tensor_piece::slice(std::vector<index_t> global_shape, int axis, index_t index, index_t ways) {
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

FUSOR_DECL tensor_piece tensor_piece::range(index_t first_element, index_t element_count) const {
  tensor_piece p = *this;
  p.first = first_element;
  p.count = element_count;
  p.check("tensor_piece::range");
  return p;
}

FUSOR_DECL void tensor_piece::check(const std::string& what) const {
  bool ok = begin.size() == global_shape.size() && shape.size() == global_shape.size() && first >= 0;
  for (std::size_t a = 0; ok && a < shape.size(); ++a)
    ok = begin[a] >= 0 && shape[a] >= 0 && begin[a] + shape[a] <= global_shape[a];
  if (ok && count >= 0) ok = first + count <= box_elements();
  if (!ok)
    throw shape_error("fusor: " + what + ": the piece at " + shape_text(begin) + " of extents " + shape_text(shape) +
                      ", elements " + std::to_string(first) + " + " + std::to_string(count) +
                      ", does not lie inside a tensor of shape " + shape_text(global_shape));
}

}  // namespace fusor::io

namespace fusor::io::detail {

FUSOR_DECL std::string shard_stem(int rank, int ranks) {
  auto five = [](int n) {
    std::string s = std::to_string(n);
    return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
  };
  return "shard-" + five(rank) + "-of-" + five(ranks);
}

FUSOR_DECL std::string join(const std::vector<index_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

FUSOR_DECL std::string place_text(const tensor_piece& p, dtype type) {
  return "global=" + join(p.global_shape) + " begin=" + join(p.begin) + " shape=" + join(p.shape) +
         " first=" + std::to_string(p.first) + " count=" + std::to_string(p.elements()) + " dtype=" + dtype_name(type);
}

FUSOR_DECL parsed_place parse_place(std::string_view text, const std::string& where) {
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

FUSOR_DECL bool boxes_meet(const tensor_piece& a, const tensor_piece& b) {
  for (std::size_t d = 0; d < a.shape.size(); ++d)
    if (std::max(a.begin[d], b.begin[d]) >= std::min(a.begin[d] + a.shape[d], b.begin[d] + b.shape[d])) return false;
  return true;
}

}  // namespace fusor::io::detail

namespace fusor::io {

FUSOR_DECL shard_writer::shard_writer(std::filesystem::path directory, int rank, int ranks, std::string save_id)
    : directory_(std::move(directory)), rank_(rank), ranks_(ranks), save_id_(std::move(save_id)) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw checkpoint_error("fusor: shard_writer: rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                           " ranks (0 <= rank < ranks)");
  if (save_id_.empty() || save_id_.find(' ') != std::string::npos)
    throw checkpoint_error("fusor: shard_writer: the save id must be a non-empty word, not '" + save_id_ + "'");
  data_.add_metadata("fusor.save", save_id_);
  index_.add_metadata("fusor.save", save_id_);
}

FUSOR_DECL void shard_writer::save() const {
  std::filesystem::create_directories(directory_);
  const std::string stem = detail::shard_stem(rank_, ranks_);
  const std::vector<std::byte> bytes = encode_safetensors(data_.contents());
  write_file_atomically(directory_ / (stem + ".safetensors"), bytes);
  checkpoint_writer index = index_;  // metadata only: cheap to copy
  index.add_metadata("fusor.shard_bytes", std::to_string(bytes.size()));
  index.add_metadata("fusor.shard_hash", content_hash_text(content_hash(bytes)));
  index.save(directory_ / (stem + ".index"));
}

FUSOR_DECL void shard_writer::check_piece(const std::string& name, const tensor_piece& place, index_t elements,
                 const std::vector<index_t>& shape) const {
  if (name.empty() || name.find_first_of(" #") != std::string::npos)
    throw checkpoint_error("fusor: shard_writer::add: the tensor name '" + name +
                           "' must be non-empty, without spaces or '#'");
  place.check("shard_writer::add('" + name + "')");
  if (elements != place.elements())
    throw shape_error("fusor: shard_writer::add('" + name + "'): the piece holds " + std::to_string(place.elements()) +
                      " elements, the values " + std::to_string(elements) + " (shape " + shape_text(shape) + ")");
}

FUSOR_DECL void shard_writer::add_piece(const std::string& name, const tensor_piece& place, dtype type, std::vector<std::byte> bytes) {
  const int k = pieces_[name]++;
  const std::string record = k == 0 ? name : name + "#" + std::to_string(k);
  data_.add_record({record, type, {place.elements()}, std::move(bytes)});
  index_.add_metadata("fusor.piece/" + name + "/" + std::to_string(k), detail::place_text(place, type) + " record=" + record);
}

FUSOR_DECL void write_manifest(const std::filesystem::path& directory, int ranks, const std::string& save_id,
                           const std::map<std::string, std::string>& metadata) {
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
    manifest.add_metadata("fusor.shard_hash/" + std::to_string(r), index.metadata("fusor.shard_hash"));
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

FUSOR_DECL sharded_checkpoint_reader::sharded_checkpoint_reader(std::filesystem::path directory) : directory_(std::move(directory)) {
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
  for (int r = 0; r < ranks_; ++r) {
    shard_bytes_.push_back(parse_count(manifest.metadata("fusor.shard_bytes/" + std::to_string(r)), file, "shard bytes"));
    const auto hash = manifest.contents().metadata.find("fusor.shard_hash/" + std::to_string(r));  // older saves: none
    shard_hashes_.push_back(hash == manifest.contents().metadata.end() ? std::string() : hash->second);
  }
}

FUSOR_DECL const std::string& sharded_checkpoint_reader::metadata(const std::string& key) const {
  const auto it = metadata_.find(key);
  if (it == metadata_.end())
    throw checkpoint_error("fusor: sharded checkpoint '" + directory_.string() + "' has no metadata '" + key + "'");
  return it->second;
}

FUSOR_DECL std::vector<std::byte> sharded_checkpoint_reader::gather(const std::string& name, const tensor_piece& place, dtype wanted,
                              index_t destination_elements) const {
  const auto& saved = find(name);
  const std::string what = "sharded checkpoint '" + directory_.string() + "': tensor '" + name + "'";
  if (saved.front().place.type != wanted)
    throw checkpoint_error("fusor: " + what + " is stored as " + dtype_name(saved.front().place.type) +
                           ", but the destination holds " + dtype_name(wanted));
  if (saved.front().place.piece.global_shape != place.global_shape)
    throw checkpoint_error("fusor: " + what + " has shape " + shape_text(saved.front().place.piece.global_shape) +
                           ", but the piece asked for is of a tensor of shape " + shape_text(place.global_shape));
  if (destination_elements != place.elements())
    throw shape_error("fusor: " + what + ": the piece asked for holds " + std::to_string(place.elements()) +
                      " elements, the destination " + std::to_string(destination_elements));
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
  return out;
}

FUSOR_DECL index_t sharded_checkpoint_reader::parse_count(const std::string& text, const std::filesystem::path& file, const std::string& key) {
  index_t n = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc{} || end != text.data() + text.size() || n < 0)
    throw checkpoint_error("fusor: '" + file.string() + "': '" + key + "' is '" + text + "', not a count");
  return n;
}

FUSOR_DECL const std::vector<sharded_checkpoint_reader::held>& sharded_checkpoint_reader::find(const std::string& name) const {
  const auto it = pieces_.find(name);
  if (it == pieces_.end())
    throw checkpoint_error("fusor: sharded checkpoint '" + directory_.string() + "' has no tensor '" + name + "'");
  return it->second;
}

FUSOR_DECL const tensor_record& sharded_checkpoint_reader::shard_tensor(int r, const std::string& name) const {
  auto& reader = shards_[r];
  if (!reader) {
    const auto file = directory_ / (detail::shard_stem(r, ranks_) + ".safetensors");
    if (!std::filesystem::exists(file))
      throw checkpoint_error("fusor: sharded checkpoint '" + directory_.string() + "': shard '" + file.string() +
                             "' is missing");
    if (index_t(std::filesystem::file_size(file)) != shard_bytes_[std::size_t(r)])
      throw checkpoint_error("fusor: shard '" + file.string() + "' is " + std::to_string(std::filesystem::file_size(file)) +
                             " bytes, but the manifest recorded " + std::to_string(shard_bytes_[std::size_t(r)]) +
                             ": it was cut short, damaged or written by another save");
    const std::vector<std::byte> bytes = read_file(file);
    auto read = std::make_unique<checkpoint_reader>(file, bytes);
    if (read->metadata("fusor.save") != save_id_)
      throw checkpoint_error("fusor: shard '" + file.string() + "' belongs to save '" + read->metadata("fusor.save") +
                             "', the manifest to '" + save_id_ + "'");
    const std::string& recorded = shard_hashes_[std::size_t(r)];
    if (!recorded.empty()) {
      const std::string found = content_hash_text(content_hash(bytes));
      if (found != recorded)
        throw checkpoint_error("fusor: shard '" + file.string() + "' does not hold what was saved: its content hash " +
                               "is " + found + ", the manifest recorded " + recorded + " (damaged on disk or in a copy)");
    }
    reader = std::move(read);
  }
  return reader->contents().at(name);
}

}  // namespace fusor::io
