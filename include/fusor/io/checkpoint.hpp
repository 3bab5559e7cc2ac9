// fusor/io/checkpoint.hpp — checkpoints: tensors of any memory space and
// layout saved to a safetensors file atomically, and read back into tensors
// of any space and layout.
//
// A checkpoint_writer collects named tensors (copied to the host at once, so
// training may go on) and string metadata, then commits them with one atomic
// write: a crash never leaves a half-written checkpoint in place of the last
// good one. Every tensor is stored in row-major order of its logical shape, as
// PyTorch and numpy expect: a col_major or nhwc tensor is reordered on the way
// out and on the way back in. A checkpoint_reader reads and validates the
// whole file once; read() checks the dtype and shape against the destination.
//
// Device tensors need a translation unit compiled by nvcc and a gap-free view;
// they are read and written with cudaMemcpy after cudaDeviceSynchronize, so
// work queued on any stream is finished first (checkpoints are not in the
// step's hot path, and a stream-ordered copy would need the caller's stream).
#pragma once

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda/std/array>

#include "fusor/core/copy.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/memory.hpp"
#include "fusor/io/file.hpp"
#include "fusor/io/safetensors.hpp"
#include "fusor/io/text_number.hpp"

namespace fusor::io {

/// The text saved as metadata `key` of the checkpoint `file`; a missing key is
/// a checkpoint_error naming the file, the key and the keys present.
FUSOR_DECL const std::string& metadata_text(const std::map<std::string, std::string>& metadata, const std::string& key,
                                        const std::filesystem::path& file);

/// The number saved as metadata `key` of the checkpoint `file` (a step, an
/// epoch), read strictly; a missing key or a value that is not such a number is
/// a checkpoint_error naming the file, the key and what was found.
template <text_number_type T>
T metadata_number(const std::map<std::string, std::string>& metadata, const std::string& key,
                  const std::filesystem::path& file) {
  const std::string& text = metadata_text(metadata, key, file);
  const text_number<T> n = parse_number<T>(text);
  if (!n)
    throw checkpoint_error("fusor: checkpoint '" + file.string() + "': metadata '" + key + "' should be " +
                           number_kind<T>() + ", but " + number_fault_text<T>(text, n.fault));
  return n.value;
}

#if defined(FUSOR_SEPARATE_COMPILATION)
// The usual number types' readers come from fusor_runtime (src/io.cpp).
extern template int metadata_number<int>(const std::map<std::string, std::string>&, const std::string&,
                                         const std::filesystem::path&);
extern template long metadata_number<long>(const std::map<std::string, std::string>&, const std::string&,
                                           const std::filesystem::path&);
extern template unsigned long metadata_number<unsigned long>(const std::map<std::string, std::string>&,
                                                             const std::string&, const std::filesystem::path&);
extern template double metadata_number<double>(const std::map<std::string, std::string>&, const std::string&,
                                               const std::filesystem::path&);
#endif

namespace detail {
// Calls visit(i, offset) for each element: i its position in row-major order
// of the logical shape, offset its position in the view's memory.
template <class View, class Visit>
void for_each_logical(const View& v, Visit&& visit) {
  ::cuda::std::array<index_t, View::rank> idx{};
  const index_t n = v.size();
  for (index_t i = 0; i < n; ++i) {
    visit(i, v.offset_of(idx));
    for (std::size_t k = View::rank; k-- > 0;) {
      if (++idx[k] < v.extent(k)) break;
      idx[k] = 0;
    }
  }
}

// Memory order already is row-major logical order: one memcpy does.
template <class View>
bool stored_row_major(const View& v) {
  if (!v.is_contiguous()) return false;
  index_t expected = 1;
  for (std::size_t k = View::rank; k-- > 0;) {
    if (v.extent(k) != 1 && v.stride(k) != expected) return false;
    expected *= v.extent(k);
  }
  return true;
}

template <class View>
std::vector<index_t> shape_of(const View& v) {
  std::vector<index_t> shape(View::rank);
  for (std::size_t k = 0; k != View::rank; ++k) shape[k] = v.extent(k);
  return shape;
}

template <class Element>
void load_element(Element* to, const std::byte* from) {
  if constexpr (std::is_same_v<Element, bool>) *to = *from != std::byte{0};  // any other byte would be UB as a bool
  else std::memcpy(to, from, sizeof(Element));
}

// From the view's memory (at `base`, host-readable) to row-major bytes.
template <class View>
void gather(const View& v, const typename View::element_type* base, std::byte* out) {
  using E = typename View::element_type;
  if (stored_row_major(v)) std::memcpy(out, base, static_cast<std::size_t>(v.size()) * sizeof(E));
  else for_each_logical(v, [&](index_t i, index_t offset) { std::memcpy(out + i * sizeof(E), base + offset, sizeof(E)); });
}
// From row-major bytes to the view's memory (at `base`, host-writable).
template <class View>
void scatter(const View& v, typename View::element_type* base, const std::byte* in) {
  using E = typename View::element_type;
  if (!std::is_same_v<E, bool> && stored_row_major(v))
    std::memcpy(base, in, static_cast<std::size_t>(v.size()) * sizeof(E));
  else
    for_each_logical(v, [&](index_t i, index_t offset) { load_element(base + offset, in + i * sizeof(E)); });
}

template <class>
inline constexpr bool needs_nvcc_for_device = false;

template <class View>
void check_device_view([[maybe_unused]] const View& v, const std::string& name) {
  using S = typename View::space;
  if constexpr (!S::host_accessible) {
    static_assert(FUSOR_HAS_CUDA || needs_nvcc_for_device<S>,
                  "fusor: checkpoints of device tensors need a translation unit compiled by nvcc");
    if (!v.is_contiguous())
      throw checkpoint_error("fusor: tensor '" + name + "' is a device view with gaps; checkpoints copy device "
                             "memory as one block: give a gap-free view (or assign() it to a tensor first)");
  }
}

#if FUSOR_HAS_CUDA
// Device memory to the host and back, after the work queued on every stream (a
// checkpoint is not stream-ordered); a write has landed before any stream reads it.
inline void read_device(void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  FUSOR_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}
inline void write_device(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());  // the destination may still be in use on another stream
  FUSOR_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
}
#endif

// The view's elements, host side, in row-major logical order.
template <class View>
std::vector<std::byte> row_major_bytes(const View& v, const std::string& name) {
  using E = typename View::element_type;
  std::vector<std::byte> out(static_cast<std::size_t>(v.size()) * sizeof(E));
  if (out.empty()) return out;
  check_device_view(v, name);
  if constexpr (View::space::host_accessible) {
    gather(v, v.data(), out.data());
  } else {
#if FUSOR_HAS_CUDA
    const std::unique_ptr<E[]> staging(new E[static_cast<std::size_t>(v.size())]);  // the view's memory order
    read_device(staging.get(), v.data(), out.size());
    gather(v, staging.get(), out.data());
#endif
  }
  return out;
}

// A row-major view (layout_right, any extents) is one block already in
// logical order. Its bytes move through these non-template functions, so a
// program compiles no copy per view type: checkpoints of a network's many
// parameter and state views cost one instance of the small add/read below each.
template <class View>
inline constexpr bool one_block_v =
    std::is_same_v<typename View::layout_type, row_major> && !std::is_same_v<typename View::element_type, bool>;

inline std::vector<std::byte> host_block_bytes(const void* data, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  if (bytes != 0) std::memcpy(out.data(), data, bytes);
  return out;
}
inline void store_host_block(void* data, const std::vector<std::byte>& bytes) {
  if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
}
#if FUSOR_HAS_CUDA
inline std::vector<std::byte> device_block_bytes(const void* data, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  read_device(out.data(), data, bytes);
  return out;
}
inline void store_device_block(void* data, const std::vector<std::byte>& bytes) {
  write_device(data, bytes.data(), bytes.size());
}
#endif

// The view's elements, host side, in row-major logical order: one block.
template <class View>
std::vector<std::byte> block_bytes(const View& v, const std::string& name) {
  check_device_view(v, name);
  const std::size_t bytes = static_cast<std::size_t>(v.size()) * sizeof(typename View::element_type);
  if constexpr (View::space::host_accessible) {
    return host_block_bytes(v.data(), bytes);
  } else {
#if FUSOR_HAS_CUDA
    return device_block_bytes(v.data(), bytes);
#else
    return {};  // check_device_view has failed to compile
#endif
  }
}
// Stores row-major bytes, as many as the view holds, into a one-block view.
template <class View>
void store_block(const View& v, const std::vector<std::byte>& bytes, const std::string& name) {
  check_device_view(v, name);
  if constexpr (View::space::host_accessible) {
    store_host_block(v.data(), bytes);
  } else {
#if FUSOR_HAS_CUDA
    store_device_block(v.data(), bytes);
#endif
  }
}

// Stores row-major bytes into the view, whatever its space and layout.
template <class View>
void store_row_major(const View& v, const std::vector<std::byte>& bytes, const std::string& name) {
  if (v.size() == 0) return;
  check_device_view(v, name);
  if constexpr (View::space::host_accessible) {
    scatter(v, v.data(), bytes.data());
  } else {
#if FUSOR_HAS_CUDA
    using E = typename View::element_type;
    const std::unique_ptr<E[]> staging(new E[static_cast<std::size_t>(v.size())]);
    scatter(v, staging.get(), bytes.data());
    write_device(v.data(), staging.get(), bytes.size());
#endif
  }
}
}  // namespace detail

/// Collects named tensors (copied to the host at once) and string metadata, then saves them as one
/// safetensors file, atomically.
class checkpoint_writer {
 public:
  /// Copies a view or tensor of any space and gap-free layout (host views may
  /// also be strided) under `name`, in row-major order of its logical shape.
  /// Throws checkpoint_error when a tensor of that name is already held.
  template <class View>
  void add(std::string name, const View& v) {
    const auto& view = as_view(v);
    using view_t = std::remove_cvref_t<decltype(view)>;
    tensor_record record{std::move(name), dtype_of<typename view_t::element_type>(), detail::shape_of(view), {}};
    if constexpr (detail::one_block_v<view_t>) record.bytes = detail::block_bytes(view, record.name);
    else record.bytes = detail::row_major_bytes(view, record.name);
    add_record(std::move(record));
  }

  /// A string saved in the header's "__metadata__" (replaces an earlier value).
  void add_metadata(std::string key, std::string value) { file_.metadata[std::move(key)] = std::move(value); }

  /// A tensor already in file form; its bytes must match its dtype and shape.
  void add_record(tensor_record record);

  /// What has been added so far, as the file will hold it.
  const safetensors_file& contents() const { return file_; }

  /// Writes the checkpoint atomically; the writer keeps its contents, so it can save again.
  void save(const std::filesystem::path& file) const;

 private:
  safetensors_file file_;
};

/// A safetensors checkpoint read and validated whole, whose tensors are copied into views or tensors of
/// any space and layout.
class checkpoint_reader {
 public:
  /// Reads and validates the whole file; errors name it.
  explicit checkpoint_reader(const std::filesystem::path& file)
      : file_(file), contents_(decode_safetensors(read_file(file), file.string())) {}
  /// The same from the file's bytes, already read (by a caller that checks them first).
  checkpoint_reader(const std::filesystem::path& file, std::span<const std::byte> bytes)
      : file_(file), contents_(decode_safetensors(bytes, file.string())) {}

  /// Copies tensor `name` into `destination` (a view or tensor of any space and
  /// layout) after checking that the dtypes and the shapes agree.
  template <class View>
  void read(const std::string& name, const View& destination) const {
    const auto& view = as_view(destination);
    using view_t = std::remove_cvref_t<decltype(view)>;
    const tensor_record& record = check(name, view);
    if constexpr (detail::one_block_v<view_t>) detail::store_block(view, record.bytes, name);
    else detail::store_row_major(view, record.bytes, name);
  }
  /// What read(name, destination) would copy, after the same checks, copying nothing: to check a whole set of
  /// tensors before any destination changes.
  template <class View>
  const tensor_record& check(const std::string& name, const View& destination) const {
    const auto& view = as_view(destination);
    using view_t = std::remove_cvref_t<decltype(view)>;
    return checked_record(name, dtype_of<typename view_t::element_type>(), detail::shape_of(view));
  }

  /// Everything the file holds: its tensors and metadata.
  const safetensors_file& contents() const { return contents_; }
  /// Whether the file holds a tensor named `name`.
  bool contains(const std::string& name) const { return contents_.find(name) != nullptr; }
  /// The file it was read from.
  const std::filesystem::path& file() const { return file_; }

  /// The number saved as `key` (io::metadata_number).
  template <text_number_type T>
  T metadata_number(const std::string& key) const {
    return io::metadata_number<T>(contents_.metadata, key, file_);
  }

  /// The metadata saved as `key`. Throws checkpoint_error when the header has no such key.
  std::string metadata(const std::string& key) const;

 private:
  // Tensor `name`, checked to hold `wanted` elements of `shape` (errors name the file, the tensor and both sides).
  const tensor_record& checked_record(const std::string& name, dtype wanted, const std::vector<index_t>& shape) const;
  const tensor_record& find_or_throw(const std::string& name) const;

  std::filesystem::path file_;
  safetensors_file contents_;
};

}  // namespace fusor::io

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/io/impl/checkpoint.ipp"
#endif
