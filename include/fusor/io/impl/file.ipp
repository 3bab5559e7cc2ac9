// fusor/io/impl/file.ipp — definitions of fusor/io/file.hpp's non-template functions (see
// FUSOR_SEPARATE_COMPILATION in fusor/config.hpp).
#pragma once

#include "fusor/io/file.hpp"

#include <random>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace fusor::io::detail {
// Closes the descriptor and removes the temporary unless disarmed.
struct temporary_file {
  int descriptor = -1;
  std::filesystem::path path;
  bool remove = true;
  temporary_file() = default;
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file() {
    if (descriptor >= 0) ::close(descriptor);
    if (remove && !path.empty()) ::unlink(path.c_str());
  }
};
}  // namespace fusor::io::detail

namespace fusor::io::detail {

[[noreturn]] FUSOR_DECL void file_failure(const std::filesystem::path& file, const std::string& step, int error_number) {
  throw checkpoint_error("fusor: cannot write file '" + file.string() + "': " + step + ": " +
                         std::generic_category().message(error_number));
}

FUSOR_DECL void remove_stale_temporaries(const std::filesystem::path& file) {
  const std::filesystem::path directory = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  const std::string prefix = "." + file.filename().string() + ".tmp.";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // "<pid>.<n>"
    const std::size_t dot = rest.find('.');
    long pid = 0;  // from_chars: a digit run too long for a pid is skipped, not thrown
    const auto [digits_end, error] = std::from_chars(rest.data(), rest.data() + (dot == std::string::npos ? 0 : dot), pid);
    if (dot == 0 || dot == std::string::npos || error != std::errc{} || digits_end != rest.data() + dot || pid <= 0 ||
        pid > long(std::numeric_limits<pid_t>::max()))
      continue;  // not a name this file's writer makes
    if (pid == long(::getpid()) || ::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code ignored;
    std::filesystem::remove(it->path(), ignored);
  }
}

}  // namespace fusor::io::detail

namespace fusor::io {

FUSOR_DECL void write_file_atomically(const std::filesystem::path& file, std::span<const std::byte> bytes) {
  using detail::file_failure;
  if (!file.has_filename()) file_failure(file, "the path names no file", EISDIR);
  const std::filesystem::path directory = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");

  detail::remove_stale_temporaries(file);
  static std::atomic<unsigned long> serial{0};
  detail::temporary_file temp;
  for (int attempt = 0;; ++attempt) {
    std::string name = ".";
    name.append(file.filename().string()).append(".tmp.").append(std::to_string(::getpid()));
    name.append(".").append(std::to_string(serial++));
    temp.path = directory / name;
    temp.descriptor = ::open(temp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (temp.descriptor >= 0) break;
    const int why = errno;
    if (why != EEXIST || attempt == 100) {
      temp.path.clear();  // not ours to remove
      file_failure(file, "cannot create a temporary file in '" + directory.string() + "'", why);
    }
  }

  std::size_t written = 0;
  while (written < bytes.size()) {
    const std::size_t chunk = std::min(detail::write_chunk_bytes, bytes.size() - written);
    const ssize_t n = ::write(temp.descriptor, bytes.data() + written, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      file_failure(file, "writing '" + temp.path.string() + "'", errno);
    }
    written += static_cast<std::size_t>(n);
    if (detail::write_test_hook) detail::write_test_hook(written);
  }
  if (::fsync(temp.descriptor) != 0) file_failure(file, "fsync of '" + temp.path.string() + "'", errno);
  if (::close(std::exchange(temp.descriptor, -1)) != 0)
    file_failure(file, "closing '" + temp.path.string() + "'", errno);
  if (::rename(temp.path.c_str(), file.c_str()) != 0)
    file_failure(file, "renaming '" + temp.path.string() + "' over it", errno);
  temp.remove = false;

  // The rename is durable only once the directory entry is on disk.
  const int dir = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) file_failure(file, "the new file is in place, but opening its directory to fsync it failed", errno);
  const int synced = ::fsync(dir);
  const int why = errno;
  ::close(dir);
  if (synced != 0) file_failure(file, "the new file is in place, but fsync of its directory failed", why);
}

FUSOR_DECL void check_destination(const std::filesystem::path& destination, destination_kind kind, std::uint64_t bytes,
                                  std::string_view what) {
  namespace fs = std::filesystem;
  const std::string save(what);
  const auto fail = [&](const std::string& why) {
    throw checkpoint_error("fusor: " + save + " destination '" + destination.string() + "': " + why);
  };
  if (destination.empty()) fail("the path is empty");
  std::error_code ec;
  const fs::file_status status = fs::status(destination, ec);
  const bool exists = fs::exists(status);
  if (kind == destination_kind::file && (!destination.has_filename() || fs::is_directory(status)))
    fail("is a folder; give the " + save + " file's name");
  if (kind == destination_kind::folder && exists && !fs::is_directory(status))
    fail("is a file; this program saves into a folder (each rank its shard)");

  // The folder the save creates its files in (a folder destination's own, when it exists).
  fs::path directory = kind == destination_kind::folder && exists ? destination : destination.parent_path();
  if (kind == destination_kind::folder && !exists && !destination.has_filename())
    directory = destination.parent_path().parent_path();  // "saves/": the parent of "saves"
  if (directory.empty()) directory = ".";
  const fs::file_status folder = fs::status(directory, ec);
  if (!fs::exists(folder)) fail("the folder '" + directory.string() + "' does not exist (create it first)");
  if (!fs::is_directory(folder)) fail("'" + directory.string() + "' is not a folder");

  // Proof that files can be made there: permissions, read-only mounts, ACLs.
  // (random part: ranks on other hosts may share the folder and the pid)
  const fs::path probe =
      directory / (".fusor-probe." + std::to_string(::getpid()) + "." + std::to_string(std::random_device{}()));
  const int descriptor = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (descriptor < 0)
    fail("cannot create a file in '" + directory.string() + "': " + std::generic_category().message(errno));
  ::close(descriptor);
  ::unlink(probe.c_str());

  const auto megabytes = [](std::uint64_t b) { return std::to_string((b + 999'999) / 1'000'000) + " MB"; };
  struct statvfs space{};
  if (bytes > 0 && ::statvfs(directory.c_str(), &space) == 0) {
    const std::uint64_t free_bytes = std::uint64_t(space.f_bavail) * space.f_frsize;
    if (free_bytes < bytes)
      fail("'" + directory.string() + "' has " + megabytes(free_bytes) + " free, a " + save + " needs about " +
           megabytes(bytes));
  }
  struct rlimit limit{};
  if (bytes > 0 && ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      std::uint64_t(limit.rlim_cur) < bytes)
    fail("the file-size limit (ulimit -f) is " + std::to_string(limit.rlim_cur) + " bytes, a " + save +
         " needs about " + std::to_string(bytes));
}

FUSOR_DECL std::vector<std::byte> read_file(const std::filesystem::path& file) {
  const auto failure = [&](const char* step, int error_number) {
    return checkpoint_error("fusor: cannot read checkpoint file '" + file.string() + "': " + step +
                            std::generic_category().message(error_number));
  };
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw failure("", errno);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_on_exit{fd};
  struct stat info{};
  if (::fstat(fd, &info) != 0) throw failure("fstat: ", errno);
  if (S_ISDIR(info.st_mode)) throw failure("", EISDIR);
  std::vector<std::byte> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  const auto read_some = [&](std::byte* to, std::size_t count) -> std::size_t {
    for (;;) {
      const ssize_t n = ::read(fd, to, count);
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) throw failure("read: ", errno);
    }
  };
  while (done < bytes.size()) {
    const std::size_t n = read_some(bytes.data() + done, bytes.size() - done);
    if (n == 0) break;  // the file shrank
    done += n;
  }
  bytes.resize(done);
  // A file that grew since fstat is read to its end.
  std::byte more[4096];
  while (const std::size_t n = read_some(more, sizeof more)) bytes.insert(bytes.end(), more, more + n);
  return bytes;
}

}  // namespace fusor::io
