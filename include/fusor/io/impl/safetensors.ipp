// fusor/io/impl/safetensors.ipp — definitions of fusor/io/safetensors.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/io/safetensors.hpp"

namespace fusor::io {
namespace detail {
struct header_entry {
  std::string name;
  dtype type;
  std::vector<index_t> shape;
  std::uint64_t begin, end;
};

// One tensor's header object: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}.
template <class Fail>
header_entry read_header_entry(const json::member& m, const Fail& fail) {
  const std::string what = "tensor '" + m.key + "'";
  if (m.item.type != json::value::kind::object)
    fail(what + " is described by " + m.item.kind_name() + ", not an object");
  const json::value *type = nullptr, *shape = nullptr, *offsets = nullptr;
  for (const json::member& field : m.item.members) {
    if (field.key == "dtype") type = &field.item;
    else if (field.key == "shape") shape = &field.item;
    else if (field.key == "data_offsets") offsets = &field.item;
  }
  if (!type || !shape || !offsets) fail(what + " lacks \"dtype\", \"shape\" or \"data_offsets\"");
  if (type->type != json::value::kind::string) fail(what + ": \"dtype\" is not a string");
  const auto t = dtype_from_name(type->text);
  if (!t)
    fail(what + " has the unknown dtype '" + type->text + "' (fusor reads F64, F32, F16, BF16, I64, I32, I16, I8, "
         "U8 and BOOL)");
  header_entry e{m.key, *t, {}, 0, 0};
  auto integers = [&](const json::value& v, const char* field) {
    if (v.type != json::value::kind::array) fail(what + ": \"" + field + "\" is not an array");
    std::vector<std::uint64_t> out;
    for (const json::value& x : v.elements) {
      if (x.type != json::value::kind::integer) fail(what + ": \"" + field + "\" holds " + x.kind_name());
      out.push_back(x.number);
    }
    return out;
  };
  for (const std::uint64_t extent : integers(*shape, "shape")) {
    if (extent > static_cast<std::uint64_t>(INT64_MAX)) fail(what + ": an extent is too large");
    e.shape.push_back(static_cast<index_t>(extent));
  }
  const auto range = integers(*offsets, "data_offsets");
  if (range.size() != 2) fail(what + ": \"data_offsets\" holds " + std::to_string(range.size()) + " numbers, not 2");
  e.begin = range[0];
  e.end = range[1];
  return e;
}
}  // namespace detail
}  // namespace fusor::io

namespace fusor::io {

FUSOR_DECL const tensor_record& safetensors_file::at(const std::string& name) const {
  if (const tensor_record* t = find(name)) return *t;
  std::string present;
  for (std::size_t i = 0; i != tensors.size() && i != 32; ++i) present += (i ? ", '" : "'") + tensors[i].name + "'";
  if (tensors.size() > 32) present += " and " + std::to_string(tensors.size() - 32) + " more";
  throw checkpoint_error("fusor: no tensor named '" + name + "'; the tensors present are: " +
                         (tensors.empty() ? std::string("none") : present));
}

FUSOR_DECL const tensor_record* safetensors_file::find(const std::string& name) const {
  for (const tensor_record& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

FUSOR_DECL index_t tensor_record::element_count() const {
  index_t n = 1;
  for (const index_t e : shape) n *= e;
  return n;
}

namespace detail {
// An IEEE binary16 value, exactly, from its bits.
template <class T>
T element_bits(const std::vector<std::byte>& bytes, index_t i) {
  T v;
  std::memcpy(&v, bytes.data() + std::size_t(i) * sizeof(T), sizeof(T));
  return v;
}
}  // namespace detail

FUSOR_DECL double tensor_record::value(index_t i) const {
  switch (type) {
    case dtype::f64: return detail::element_bits<double>(bytes, i);
    case dtype::f32: return detail::element_bits<float>(bytes, i);
    case dtype::f16: return convert<float>(from_bits<float16>(detail::element_bits<std::uint16_t>(bytes, i)));
    case dtype::bf16: return convert<float>(from_bits<bfloat16>(detail::element_bits<std::uint16_t>(bytes, i)));
    case dtype::i64: return double(detail::element_bits<std::int64_t>(bytes, i));
    case dtype::i32: return detail::element_bits<std::int32_t>(bytes, i);
    case dtype::i16: return detail::element_bits<std::int16_t>(bytes, i);
    case dtype::i8: return detail::element_bits<std::int8_t>(bytes, i);
    case dtype::u8: return detail::element_bits<std::uint8_t>(bytes, i);
    default: return detail::element_bits<std::uint8_t>(bytes, i) != 0;  // boolean
  }
}

FUSOR_DECL std::string shape_text(const std::vector<index_t>& shape) {
  return fusor::detail::extents_text(shape.data(), shape.size());
}

}  // namespace fusor::io

namespace fusor::io::detail {

FUSOR_DECL std::optional<std::uint64_t> byte_count(const std::vector<index_t>& shape, dtype t) {
  std::uint64_t n = dtype_size(t);
  for (const index_t e : shape) {
    if (e < 0) return std::nullopt;
    const auto u = static_cast<std::uint64_t>(e);
    if (u != 0 && n > UINT64_MAX / u) return std::nullopt;
    n *= u;
  }
  return n;
}

FUSOR_DECL void check_record(const tensor_record& t) {
  if (t.name == metadata_key)
    throw checkpoint_error("fusor: a tensor cannot be named '__metadata__': safetensors reserves that name");
  const auto bytes = byte_count(t.shape, t.type);
  if (!bytes || *bytes != t.bytes.size())
    throw checkpoint_error("fusor: tensor '" + t.name + "' of dtype " + dtype_name(t.type) + " and shape " +
                           shape_text(t.shape) + " holds " + std::to_string(t.bytes.size()) + " bytes, not " +
                           (bytes ? std::to_string(*bytes) : std::string("a representable count")));
}

}  // namespace fusor::io::detail

namespace fusor::io {

FUSOR_DECL std::vector<std::byte> encode_safetensors(const safetensors_file& file) {
  std::string header = "{";
  if (!file.metadata.empty()) {
    detail::json::write_string(header, detail::metadata_key);
    header += ":{";
    bool first = true;
    for (const auto& [key, value] : file.metadata) {
      if (!std::exchange(first, false)) header += ',';
      detail::json::write_string(header, key);
      header += ':';
      detail::json::write_string(header, value);
    }
    header += '}';
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i != file.tensors.size(); ++i) {
    const tensor_record& t = file.tensors[i];
    detail::check_record(t);
    for (std::size_t j = 0; j != i; ++j)
      if (file.tensors[j].name == t.name) throw checkpoint_error("fusor: two tensors are named '" + t.name + "'");
    if (header.size() > 1) header += ',';
    detail::json::write_string(header, t.name);
    header += std::string(":{\"dtype\":\"") + dtype_name(t.type) + "\",\"shape\":[";
    for (std::size_t r = 0; r != t.shape.size(); ++r) {
      if (r) header += ',';
      header += std::to_string(t.shape[r]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += t.bytes.size();
    header += std::to_string(offset) + "]}";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned in the file

  std::vector<std::byte> out(8 + header.size() + offset);
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);  // little-endian: checked above
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::byte* data = out.data() + 8 + header.size();
  for (const tensor_record& t : file.tensors) {
    if (!t.bytes.empty()) std::memcpy(data, t.bytes.data(), t.bytes.size());
    data += t.bytes.size();
  }
  return out;
}

FUSOR_DECL safetensors_file decode_safetensors(std::span<const std::byte> bytes, const std::string& source_name) {
  const auto fail = [&](const std::string& problem) {
    throw checkpoint_error("fusor: safetensors file '" + source_name + "': " + problem);
  };
  if (bytes.size() < 8)
    fail("the file is " + std::to_string(bytes.size()) + " bytes long, too short for the 8-byte header length");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > detail::max_header_bytes) fail("the header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > bytes.size() - 8)
    fail("the header length " + std::to_string(n) + " reaches past the end of the file (" +
         std::to_string(bytes.size()) + " bytes)");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (const auto bad = detail::json::invalid_utf8_at(text); bad != std::string_view::npos)
    fail("the header is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  detail::json::value root;
  try {
    root = detail::json::parse(text);
  } catch (const detail::json::syntax_error& e) {
    fail(std::string("the header is not valid JSON: ") + e.what());
  }
  if (root.type != detail::json::value::kind::object) fail(std::string("the header is ") + root.kind_name() + ", not an object");

  safetensors_file file;
  std::vector<detail::header_entry> entries;
  bool seen_metadata = false;
  for (const detail::json::member& m : root.members) {
    if (m.key == detail::metadata_key) {
      if (std::exchange(seen_metadata, true)) fail("\"__metadata__\" appears twice");
      if (m.item.type != detail::json::value::kind::object) fail("\"__metadata__\" is not an object");
      for (const detail::json::member& kv : m.item.members) {
        if (kv.item.type != detail::json::value::kind::string)
          fail("metadata '" + kv.key + "' is " + kv.item.kind_name() + "; safetensors metadata maps strings to strings");
        if (!file.metadata.emplace(kv.key, kv.item.text).second) fail("metadata '" + kv.key + "' appears twice");
      }
      continue;
    }
    for (const detail::header_entry& other : entries)
      if (other.name == m.key) fail("duplicate tensor name '" + m.key + "'");
    entries.push_back(detail::read_header_entry(m, fail));
  }

  // The ranges, in file order, must tile the data exactly.
  const std::uint64_t data_size = bytes.size() - 8 - n;
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expected_begin = 0;
  const detail::header_entry* previous = nullptr;
  for (const detail::header_entry& e : entries) {
    const std::string range = std::string("[") + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) fail("tensor '" + e.name + "' has data_offsets " + range + " that end before they begin");
    if (e.end > data_size)
      fail("tensor '" + e.name + "' has data_offsets " + range + " out of range: the data holds " +
           std::to_string(data_size) + " bytes");
    const auto needed = detail::byte_count(e.shape, e.type);
    if (!needed) fail("tensor '" + e.name + "' has a shape whose byte count overflows");
    if (*needed != e.end - e.begin)
      fail("tensor '" + e.name + "' of dtype " + dtype_name(e.type) + " and shape " + shape_text(e.shape) + " needs " +
           std::to_string(*needed) + " bytes, but its data_offsets " + range + " hold " +
           std::to_string(e.end - e.begin));
    if (e.begin < expected_begin)
      fail("tensor '" + e.name + "' (data_offsets " + range + ") overlaps tensor '" + previous->name + "'");
    if (e.begin > expected_begin)
      fail("a gap of " + std::to_string(e.begin - expected_begin) + " bytes lies before tensor '" + e.name +
           "' (data_offsets " + range + ")" + (previous ? ", after tensor '" + previous->name + "'" : std::string()));
    expected_begin = e.end;
    previous = &e;
  }
  if (expected_begin != data_size)
    fail(std::to_string(data_size - expected_begin) + " bytes after the last tensor belong to none (the data holds " +
         std::to_string(data_size) + " bytes)");

  const std::byte* data = bytes.data() + 8 + n;
  for (detail::header_entry& e : entries)
    file.tensors.push_back({std::move(e.name), e.type, std::move(e.shape),
                            std::vector<std::byte>(data + e.begin, data + e.end)});
  return file;
}

FUSOR_DECL std::optional<dtype> dtype_from_name(std::string_view name) {
  for (const dtype t : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64, dtype::i32, dtype::i16,
                        dtype::i8, dtype::u8, dtype::boolean})
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

}  // namespace fusor::io
