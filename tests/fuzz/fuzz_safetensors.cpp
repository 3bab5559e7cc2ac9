// libFuzzer target: io::decode_safetensors. Any bytes either decode or throw
// io::checkpoint_error; a decoded file encoded again decodes to the same
// tensors (names, dtypes, shapes, bytes, in order) and metadata.
#include <cstddef>
#include <cstdint>
#include <span>

#include <fusor/io/safetensors.hpp>

#include "fuzz_support.hpp"

namespace io = fusor::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  io::safetensors_file decoded;
  try {
    decoded = io::decode_safetensors(bytes, "fuzz input");
  } catch (const io::checkpoint_error&) {
    return 0;
  }
  const std::vector<std::byte> encoded = io::encode_safetensors(decoded);
  const io::safetensors_file again = io::decode_safetensors(encoded, "re-encoded fuzz input");
  fuzz::require(again.metadata == decoded.metadata);
  fuzz::require(again.tensors.size() == decoded.tensors.size());
  for (std::size_t i = 0; i != decoded.tensors.size(); ++i) {
    const io::tensor_record &a = decoded.tensors[i], &b = again.tensors[i];
    fuzz::require(a.name == b.name && a.type == b.type && a.shape == b.shape && a.bytes == b.bytes);
  }
  return 0;
}
