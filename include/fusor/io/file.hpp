// fusor/io/file.hpp — whole-file writes that a crash cannot half-do, and
// whole-file reads; both throw checkpoint_error naming the file and the
// system's reason. check_destination proves, before a program trains, that
// its saves will be able to write where they are asked to.
//
// write_file_atomically writes a temporary file beside the target (same
// directory, so same file system), fsyncs it, renames it over the target and
// fsyncs the directory: at every instant the target is either the complete old
// file or the complete new one. A process killed mid-write leaves the old file
// and a stray ".<name>.tmp.<pid>.<n>" beside it, which the next write of the
// same file removes (a temporary whose process is still alive is left alone);
// any failure it sees itself removes the temporary and leaves the target
// untouched. POSIX (Linux) only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "fusor/io/safetensors.hpp"

namespace fusor::io {

namespace detail {
// Bytes per write() call; between calls the test hook below may interrupt.
inline constexpr std::size_t write_chunk_bytes = std::size_t(1) << 20;

// Tests only: called after each chunk reaches the temporary file with the bytes
// written so far, to simulate a crash (raise SIGKILL) or a failure (throw).
inline void (*write_test_hook)(std::size_t bytes_written) = nullptr;

[[noreturn]] FUSOR_DECL void file_failure(const std::filesystem::path& file, const std::string& step, int error_number);

// The temporaries ".<name>.tmp.<pid>.<n>" of `file` left by processes that
// died while writing it (kill(pid, 0) fails); those of live processes, this
// one's included, stay. Best effort: a temporary it cannot remove stays too.
FUSOR_DECL void remove_stale_temporaries(const std::filesystem::path& file);

}  // namespace detail

/// Replaces `file` by `bytes`, atomically and durably (see the top of io/file.hpp): a temporary file
/// beside it is written, fsynced and renamed over it. Throws checkpoint_error naming the file and the reason.
FUSOR_DECL void write_file_atomically(const std::filesystem::path& file, std::span<const std::byte> bytes);

/// What a save writes at its destination: one file, or a folder of files (a
/// distributed checkpoint: every rank its shard).
enum class destination_kind { file, folder };

/// Throws checkpoint_error, naming the path and the fault, unless a save of
/// about `bytes` could be written at `destination` now: the path is of the
/// right kind (not a folder where a file is wanted, nor the reverse), the folder
/// it goes into exists (a folder destination may be created by the save: then
/// its parent must exist), a file can be created there (one is created and
/// removed), the file system has `bytes` free and the file-size limit
/// (ulimit -f) allows them. For programs to call before training, so that a
/// destination that cannot work fails in the first second, not at the first save. `what` names the save in the
/// messages ("checkpoint", "metrics").
FUSOR_DECL void check_destination(const std::filesystem::path& destination, destination_kind kind,
                                  std::uint64_t bytes = 0, std::string_view what = "checkpoint");

/// The whole file's bytes. Throws checkpoint_error naming the file and the system's reason.
FUSOR_DECL std::vector<std::byte> read_file(const std::filesystem::path& file);

}  // namespace fusor::io

#if !defined(FUSOR_SEPARATE_COMPILATION)
#include "fusor/io/impl/file.ipp"
#endif
