// Damaging a good checkpoint on purpose, for the tests that check what a
// loader refuses: a copy of a file's tensors and metadata with some tensors
// changed or left out, and one element of a tensor set to a value, in the
// tensor's own dtype.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>

#include <fusor/core/precision.hpp>
#include <fusor/io/checkpoint.hpp>
#include <fusor/io/content_hash.hpp>
#include <fusor/io/file.hpp>
#include <fusor/io/sharded_checkpoint.hpp>

namespace fusor_test {

// Writes `contents` (its tensors and metadata) to `file`, each tensor passed through edit(record) first:
// edit changes the record and returns whether to keep it.
template <class Edit>
void write_edited(const fusor::io::safetensors_file& contents, const std::filesystem::path& file, Edit&& edit) {
  fusor::io::checkpoint_writer writer;
  for (fusor::io::tensor_record t : contents.tensors)
    if (edit(t)) writer.add_record(std::move(t));
  for (const auto& [key, value] : contents.metadata) writer.add_metadata(key, value);
  writer.save(file);
}

// Element `element` of `record` set to `value` in its dtype (f32, bf16, i64 or u8).
inline void set_element(fusor::io::tensor_record& record, fusor::index_t element, double value) {
  const auto put = [&](const auto v) { std::memcpy(record.bytes.data() + element * sizeof v, &v, sizeof v); };
  switch (record.type) {
    case fusor::io::dtype::f32: return put(float(value));
    case fusor::io::dtype::bf16: return put(fusor::bfloat16(float(value)));
    case fusor::io::dtype::i64: return put(std::int64_t(value));
    case fusor::io::dtype::u8: return put(std::uint8_t(value));
    default: throw std::logic_error("set_element: tensor '" + record.name + "' has a dtype this helper does not write");
  }
}

// After a deliberate edit of shard `rank` (the file `shard`) of the sharded checkpoint in `directory`: the manifest
// records the shard's new content hash, as a save of those values would have (damage leaves it as it was), so
// that the loader's checks of the values, not of the hash, are what a test sees.
inline void record_shard_hash(const std::filesystem::path& directory, int rank, const std::filesystem::path& shard) {
  const std::filesystem::path manifest = directory / fusor::io::detail::manifest_name;
  fusor::io::safetensors_file contents = fusor::io::checkpoint_reader(manifest).contents();
  contents.metadata["fusor.shard_hash/" + std::to_string(rank)] =
      fusor::io::content_hash_text(fusor::io::content_hash(fusor::io::read_file(shard)));
  write_edited(contents, manifest, [](fusor::io::tensor_record&) { return true; });
}

}  // namespace fusor_test
