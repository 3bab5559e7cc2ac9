// write_file_atomically and read_file: a process killed mid-write (SIGKILL
// after the first chunk, in a forked child) leaves the previous checkpoint
// byte-identical and loadable; a failure inside the write removes the
// temporary; a directory the writer may not write to fails with an error naming
// the file and the reason and leaves the old file; read errors name the file.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "io/io_support.hpp"

using namespace io_test;

namespace {

// A checkpoint of about `megabytes` MiB of random float32 weights.
fio::checkpoint_writer big_checkpoint(std::size_t megabytes, std::uint64_t seed) {
  fio::checkpoint_writer writer;
  const index_t count = index_t(megabytes) * (1 << 20) / 4;
  fio::tensor_record r{"weights", fio::dtype::f32, {count}, random_bytes<float>(count, seed)};
  writer.add_record(std::move(r));
  writer.add_metadata("seed", std::to_string(seed));
  return writer;
}

std::vector<std::filesystem::path> entries(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  return out;
}

}  // namespace

TEST_CASE("write_file_atomically replaces a file's contents and read_file reads them back") {
  scratch_directory dir("replace");
  const auto file = dir / "state.bin";
  const auto first = random_bytes<std::uint8_t>(3 << 20, 1);  // several chunks
  fio::write_file_atomically(file, first);
  CHECK(fio::read_file(file) == first);
  const auto second = random_bytes<std::uint8_t>(1000, 2);
  fio::write_file_atomically(file, second);
  CHECK(fio::read_file(file) == second);
  fio::write_file_atomically(file, {});
  CHECK(fio::read_file(file).empty());
  CHECK(entries(dir.path) == std::vector<std::filesystem::path>{"state.bin"});  // no temporaries left
}

TEST_CASE("a process killed in the middle of a checkpoint write leaves the previous checkpoint intact") {
  scratch_directory dir("crash");
  const auto file = dir / "model.safetensors";
  const fio::checkpoint_writer previous = big_checkpoint(1, 21);
  previous.save(file);
  const std::vector<std::byte> before = fio::read_file(file);

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child: SIGKILL right after the first chunk of a 16 MiB checkpoint reached the disk.
    fio::detail::write_test_hook = [](std::size_t) { ::raise(SIGKILL); };
    try {
      big_checkpoint(16, 22).save(file);
    } catch (...) {
    }
    ::_exit(3);  // reached only if the hook never ran
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  // The old file is byte-identical and loads; the dead writer's partial temporary is beside it.
  CHECK(fio::read_file(file) == before);
  const fio::checkpoint_reader reader(file);
  CHECK(reader.metadata("seed") == "21");
  CHECK(reader.contents().at("weights").bytes == previous.contents().at("weights").bytes);
  std::size_t temporaries = 0;
  for (const auto& name : entries(dir.path)) {
    if (name == "model.safetensors") continue;
    ++temporaries;
    CHECK(name.string().starts_with(".model.safetensors.tmp."));
    CHECK(std::filesystem::file_size(dir.path / name) == fio::detail::write_chunk_bytes);
  }
  CHECK(temporaries == 1);

  // The next save succeeds and removes the dead writer's temporary; a live
  // process's temporary (this one's pid: it is alive) and another file's stay.
  const std::filesystem::path live = dir / (".model.safetensors.tmp." + std::to_string(::getpid()) + ".999");
  const std::filesystem::path other = dir / ".other.safetensors.tmp.1.0";
  const std::filesystem::path odd = dir / ".model.safetensors.tmp.99999999999999999999999.0";  // no pid: left alone
  for (const auto& p : {live, other, odd}) fio::write_file_atomically(p, std::span<const std::byte>{});
  const fio::checkpoint_writer next = big_checkpoint(2, 23);
  next.save(file);
  CHECK(fio::checkpoint_reader(file).metadata("seed") == "23");
  std::vector<std::filesystem::path> left = entries(dir.path);
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::filesystem::path>{live.filename(), odd.filename(), other.filename(), "model.safetensors"});
}

TEST_CASE("a failure during the write removes the temporary and leaves the previous file untouched") {
  scratch_directory dir("failure");
  const auto file = dir / "model.safetensors";
  big_checkpoint(1, 31).save(file);
  const std::vector<std::byte> before = fio::read_file(file);

  fio::detail::write_test_hook = [](std::size_t written) {
    if (written >= fio::detail::write_chunk_bytes) throw fio::checkpoint_error("simulated failure after one chunk");
  };
  CHECK_THROWS_WITH_AS(big_checkpoint(4, 32).save(file), doctest::Contains("simulated failure"), fio::checkpoint_error);
  fio::detail::write_test_hook = nullptr;

  CHECK(fio::read_file(file) == before);
  CHECK(entries(dir.path) == std::vector<std::filesystem::path>{"model.safetensors"});
}

TEST_CASE("a write into a directory the writer may not write to fails clearly and leaves the old file") {
  scratch_directory dir("readonly");
  const auto file = dir / "model.safetensors";
  big_checkpoint(1, 41).save(file);
  const std::vector<std::byte> before = fio::read_file(file);
  std::filesystem::permissions(dir.path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec |
                                             std::filesystem::perms::group_read | std::filesystem::perms::group_exec |
                                             std::filesystem::perms::others_read | std::filesystem::perms::others_exec);

  // Root ignores permissions, so the attempt runs in a child that drops to an
  // unprivileged user first; its error message comes back through a pipe.
  int channel[2];
  REQUIRE(::pipe(channel) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(channel[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(4);
    std::string message = "no error";
    try {
      big_checkpoint(1, 42).save(file);
    } catch (const fio::checkpoint_error& e) {
      message = e.what();
    }
    if (::write(channel[1], message.data(), message.size()) < 0) ::_exit(5);
    ::_exit(0);
  }
  ::close(channel[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(channel[0], buffer, sizeof buffer)) > 0;) message.append(buffer, std::size_t(n));
  ::close(channel[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE_MESSAGE(WEXITSTATUS(status) == 0, "the child could not drop to uid/gid 65534 (exit 4) or report (exit 5)");

  INFO("message: ", message);
  CHECK(message.find("cannot write file '" + file.string() + "'") != std::string::npos);
  CHECK(message.find("cannot create a temporary file") != std::string::npos);
  CHECK(message.find("Permission denied") != std::string::npos);
  CHECK(fio::read_file(file) == before);
  CHECK(entries(dir.path) == std::vector<std::filesystem::path>{"model.safetensors"});
}

TEST_CASE("errors of read_file and write_file_atomically name the file and the reason") {
  scratch_directory dir("errors");
  expect_error<fio::checkpoint_error>([&] { (void)fio::read_file(dir / "absent.safetensors"); },
                                      {"cannot read checkpoint file", "absent.safetensors", "No such file or directory"});
  expect_error<fio::checkpoint_error>([&] { (void)fio::read_file(dir.path); }, {"Is a directory"});
  expect_error<fio::checkpoint_error>(
      [&] { fio::write_file_atomically(dir / "missing" / "model.safetensors", bytes_of("x")); },
      {"cannot write file", "missing/model.safetensors", "No such file or directory"});
  std::filesystem::create_directory(dir / "taken");
  const std::string taken = "'" + (dir / "taken").string() + "'";
  expect_error<fio::checkpoint_error>([&] { fio::write_file_atomically(dir / "taken", bytes_of("x")); },
                                      {taken.c_str(), "renaming", "Is a directory"});
  CHECK(entries(dir.path) == std::vector<std::filesystem::path>{"taken"});
}
