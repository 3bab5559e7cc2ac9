// fusor/core/buffer.hpp — an owning block of untyped scratch memory in a space:
// workspaces for cuBLASLt, temporary storage for CUB, partial results.
//
// Device buffers come from the stream-ordered pool like tensors do, so a
// workspace allocated and freed every step costs no driver call.
#pragma once

#include <cstddef>
#include <utility>

#include "fusor/core/memory.hpp"

namespace fusor {

/// An owning block of untyped, uninitialised memory in `Space`, freed on destruction; move-only.
///
/// Device buffers come from the stream-ordered pool on their stream.
template <class Space>
class buffer {
 public:
  /// An empty buffer: no memory, size 0.
  buffer() = default;
  /// Allocates `bytes` bytes in `Space`, ordered on `stream`; throws allocation_error when that fails.
  explicit buffer(std::size_t bytes, stream_t stream = {})
      : data_(allocate<Space>(bytes, stream)), bytes_(bytes), stream_(stream) {}
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  /// Takes `other`'s memory, leaving it empty.
  buffer(buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), stream_(other.stream_) {}
  /// Frees this buffer's memory and takes `other`'s, leaving it empty.
  buffer& operator=(buffer&& other) noexcept {
    if (this != &other) {
      deallocate<Space>(data_, stream_);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      stream_ = other.stream_;
    }
    return *this;
  }
  ~buffer() { deallocate<Space>(data_, stream_); }

  /// Grows (never shrinks) to at least `bytes`; the old contents are not kept.
  void reserve(std::size_t bytes) {
    if (bytes > bytes_) *this = buffer(bytes, stream_);
  }

  /// The start of the memory, or nullptr when empty.
  void* data() const { return data_; }
  /// The start of the memory as a `T*`.
  template <class T>
  T* as() const { return static_cast<T*>(data_); }
  /// The size in bytes.
  std::size_t size() const { return bytes_; }
  /// The stream the memory is allocated and freed on.
  stream_t stream() const { return stream_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  stream_t stream_{};
};

}  // namespace fusor
