// fusor/io/impl/checkpoint.ipp — definitions of fusor/io/checkpoint.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/io/checkpoint.hpp"

namespace fusor::io {

FUSOR_DECL const std::string& metadata_text(const std::map<std::string, std::string>& metadata, const std::string& key,
                                        const std::filesystem::path& file) {
  const auto it = metadata.find(key);
  if (it != metadata.end()) return it->second;
  std::string present;
  for (const auto& [k, v] : metadata) present += (present.empty() ? "'" : ", '") + k + "'";
  throw checkpoint_error("fusor: checkpoint '" + file.string() + "' has no metadata '" + key +
                         "' (was it saved by this program?); the keys present are: " +
                         (present.empty() ? std::string("none") : present));
}

FUSOR_DECL void checkpoint_writer::add_record(tensor_record record) {
  detail::check_record(record);
  if (file_.find(record.name)) throw checkpoint_error("fusor: the checkpoint already holds a tensor named '" + record.name + "'");
  file_.tensors.push_back(std::move(record));
}

FUSOR_DECL void checkpoint_writer::save(const std::filesystem::path& file) const { write_file_atomically(file, encode_safetensors(file_)); }

FUSOR_DECL std::string checkpoint_reader::metadata(const std::string& key) const { return metadata_text(contents_.metadata, key, file_); }

FUSOR_DECL const tensor_record& checkpoint_reader::checked_record(const std::string& name, dtype wanted, const std::vector<index_t>& shape) const {
  const tensor_record& record = find_or_throw(name);
  if (record.type != wanted)
    throw checkpoint_error("fusor: checkpoint '" + file_.string() + "': tensor '" + name + "' is stored as " +
                           dtype_name(record.type) + ", but the destination holds " + dtype_name(wanted));
  if (record.shape != shape)
    throw checkpoint_error("fusor: checkpoint '" + file_.string() + "': tensor '" + name + "' has shape " +
                           shape_text(record.shape) + ", but the destination has shape " + shape_text(shape));
  return record;
}

FUSOR_DECL const tensor_record& checkpoint_reader::find_or_throw(const std::string& name) const {
  try {
    return contents_.at(name);
  } catch (const checkpoint_error& e) {
    throw checkpoint_error(std::string(e.what()) + " (in checkpoint '" + file_.string() + "')");
  }
}

}  // namespace fusor::io
