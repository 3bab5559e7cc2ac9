// fusor/io/safetensors.hpp — the safetensors format, in memory on the host:
// encode named tensors (and string metadata) to bytes, decode and validate bytes.
//
// The format, as Hugging Face's reference implementation reads it: an 8-byte
// little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__": {"key": "value"}, "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// (padded with spaces to a multiple of 8), then the tensors' bytes: row-major,
// little-endian, offsets relative to the end of the header, covering the rest
// of the file with no gap and no overlap. Files fusor writes load with
// `safetensors.numpy.load_file` and `safetensors.torch.load_file`.
//
// fusor keeps the tensors in the order they were added (the reference sorts
// them by alignment and name; readers do not care). Decoding checks everything
// the reference checks and names the source and the problem; files go through
// fusor/io/checkpoint.hpp, which writes them atomically.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "fusor/core/error.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/io/json.hpp"

namespace fusor::io {

static_assert(std::endian::native == std::endian::little,
              "fusor: safetensors files are little-endian, and fusor copies tensors' bytes as they are");

/// A checkpoint that cannot be written, read or decoded, or does not match
/// what the program asks of it.
struct checkpoint_error : error {
  using error::error;
};

/// The element types a safetensors file stores (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL).
enum class dtype { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean };

/// Bytes per element of `t`.
inline constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f64: case dtype::i64: return 8;
    case dtype::f32: case dtype::i32: return 4;
    case dtype::f16: case dtype::bf16: case dtype::i16: return 2;
    default: return 1;
  }
}

/// The name in a safetensors header: "F32", "BF16", "BOOL", ...
inline constexpr const char* dtype_name(dtype t) {
  switch (t) {
    case dtype::f64: return "F64";
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::i64: return "I64";
    case dtype::i32: return "I32";
    case dtype::i16: return "I16";
    case dtype::i8: return "I8";
    case dtype::u8: return "U8";
    default: return "BOOL";
  }
}

/// The dtype a header's name stands for ("F32", "BF16", ...); nullopt for a name fusor does not read.
FUSOR_DECL std::optional<dtype> dtype_from_name(std::string_view name);

namespace detail {
template <class>
inline constexpr bool no_safetensors_dtype = false;
}

/// The dtype that stores an element type or a precision policy's storage type
/// (dtype_of<float>(), dtype_of<fusor::bfloat16>(), dtype_of<fusor::bf16>()).
template <class Element>
constexpr dtype dtype_of() {
  using E = std::remove_cv_t<storage_t<Element>>;
  if constexpr (std::is_same_v<E, double>) return dtype::f64;
  else if constexpr (std::is_same_v<E, float>) return dtype::f32;
  else if constexpr (std::is_same_v<E, float16>) return dtype::f16;
  else if constexpr (std::is_same_v<E, bfloat16>) return dtype::bf16;
  else if constexpr (std::is_same_v<E, bool>) return dtype::boolean;
  else if constexpr (std::is_integral_v<E> && std::is_signed_v<E> && sizeof(E) == 8) return dtype::i64;
  else if constexpr (std::is_integral_v<E> && std::is_signed_v<E> && sizeof(E) == 4) return dtype::i32;
  else if constexpr (std::is_integral_v<E> && std::is_signed_v<E> && sizeof(E) == 2) return dtype::i16;
  else if constexpr (std::is_integral_v<E> && std::is_signed_v<E> && sizeof(E) == 1) return dtype::i8;
  else if constexpr (std::is_integral_v<E> && std::is_unsigned_v<E> && sizeof(E) == 1) return dtype::u8;
  else
    static_assert(detail::no_safetensors_dtype<E>,
                  "fusor: safetensors stores F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL elements; "
                  "this element type is none of them");
}

/// "[2, 3]", as fusor's shape errors write shapes.
FUSOR_DECL std::string shape_text(const std::vector<index_t>& shape);

/// One tensor as the file holds it: row-major bytes of its logical shape.
struct tensor_record {
  std::string name;  ///< The tensor's name in the file.
  dtype type = dtype::f32;  ///< Its element type.
  std::vector<index_t> shape;  ///< Empty: a scalar (one element)
  std::vector<std::byte> bytes;  ///< Its elements, row-major and little-endian.

  /// The number of elements: the product of the extents (1 for a scalar).
  index_t element_count() const;
  /// Element `i` (row-major) as a double, whatever the dtype (true is 1): for checks of what a file holds.
  double value(index_t i) const;
};

/// A whole safetensors file in memory: its tensors and its string metadata.
struct safetensors_file {
  std::vector<tensor_record> tensors;  ///< In the order of their bytes in the file
  std::map<std::string, std::string> metadata;  ///< The header's "__metadata__": strings by key.

  /// The tensor named `name`, or null.
  const tensor_record* find(const std::string& name) const;
  /// The tensor named `name`; throws checkpoint_error naming `name` and the names present.
  const tensor_record& at(const std::string& name) const;
};

namespace detail {
inline constexpr std::string_view metadata_key = "__metadata__";
// The reference refuses larger headers; so does fusor, before allocating.
inline constexpr std::uint64_t max_header_bytes = 100'000'000;

// Element count times element size, or nullopt on overflow or a negative extent.
FUSOR_DECL std::optional<std::uint64_t> byte_count(const std::vector<index_t>& shape, dtype t);

FUSOR_DECL void check_record(const tensor_record& t);
}  // namespace detail

/// `file` encoded: the whole file's bytes. Throws checkpoint_error for a duplicate name, a
/// reserved name, or bytes that do not match a record's dtype and shape.
FUSOR_DECL std::vector<std::byte> encode_safetensors(const safetensors_file& file);


/// Decodes and validates a whole file's bytes; every error is a checkpoint_error
/// naming `source_name` (the file) and the problem.
FUSOR_DECL safetensors_file decode_safetensors(std::span<const std::byte> bytes, const std::string& source_name);

}  // namespace fusor::io

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/io/impl/safetensors.ipp"
#endif
