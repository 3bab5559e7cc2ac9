// io::check_destination: every destination a save could not write to is
// refused before any training, naming the path and the fault; one it can write
// to passes and is left as it was (the probe file removed).
#include <sys/resource.h>

#include <fstream>
#include <string>

#include "io/io_support.hpp"

using namespace io_test;
using fusor_test::expect_error;

namespace {

bool folder_is_empty(const std::filesystem::path& dir) {
  return std::filesystem::directory_iterator(dir) == std::filesystem::directory_iterator();
}

}  // namespace

TEST_CASE("check_destination passes a file or folder a save can write, and leaves nothing behind") {
  scratch_directory dir("destination_ok");
  fio::check_destination(dir / "model.safetensors", fio::destination_kind::file, 1000);
  CHECK(folder_is_empty(dir.path));
  std::ofstream(dir / "old.safetensors") << "an older checkpoint";  // replacing a file is fine
  fio::check_destination(dir / "old.safetensors", fio::destination_kind::file);
  fio::check_destination(dir.path, fio::destination_kind::folder, 1000);           // an existing folder of saves
  fio::check_destination(dir / "saves", fio::destination_kind::folder);            // made by the first save
  fio::check_destination(dir.path.string() + "/saves/", fio::destination_kind::folder);
  CHECK_FALSE(std::filesystem::exists(dir / "saves"));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("check_destination refuses each destination that cannot work, naming it and why") {
  scratch_directory dir("destination_bad");
  const std::string d = dir.path.string();
  std::filesystem::create_directories(dir / "a_folder");
  std::ofstream(dir / "a_file") << "x";
  using fio::destination_kind;
  const auto refuse = [](const std::filesystem::path& p, destination_kind kind, std::initializer_list<const char*> parts,
                         std::uint64_t bytes = 0) {
    INFO("destination: ", p.string());
    expect_error<fio::checkpoint_error>([&] { fio::check_destination(p, kind, bytes); }, parts);
  };
  refuse("", destination_kind::file, {"the path is empty"});
  refuse(dir / "a_folder", destination_kind::file, {("'" + d + "/a_folder': is a folder; give the checkpoint file's name").c_str()});
  refuse(d + "/x/", destination_kind::file, {"is a folder"});
  refuse(dir / "missing" / "model.safetensors", destination_kind::file,
         {("the folder '" + d + "/missing' does not exist (create it first)").c_str()});
  refuse(dir / "a_file" / "model.safetensors", destination_kind::file, {("'" + d + "/a_file' is not a folder").c_str()});
  refuse(dir / "a_file", destination_kind::folder, {"is a file; this program saves into a folder"});
  refuse(dir / "missing" / "saves", destination_kind::folder, {"the folder", "/missing' does not exist"});
  // A folder no file can be made in, even by root: /proc.
  refuse("/proc/model.safetensors", destination_kind::file, {"cannot create a file in '/proc'"});
  // More than the file system holds.
  refuse(dir / "model.safetensors", destination_kind::file, {"free, a checkpoint needs about 4611686018428 MB"},
         std::uint64_t(1) << 62);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), std::filesystem::directory_iterator()) == 2);
}

TEST_CASE("check_destination refuses a checkpoint larger than the file-size limit (ulimit -f)") {
  scratch_directory dir("destination_limit");
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  rlimit lowered = before;
  lowered.rlim_cur = 1 << 20;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  std::string message;
  try {
    fio::check_destination(dir / "model.safetensors", fio::destination_kind::file, 5'000'000);
  } catch (const fio::checkpoint_error& e) {
    message = e.what();
  }
  fio::check_destination(dir / "model.safetensors", fio::destination_kind::file, 1000);  // under the limit: fine
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &before) == 0);
  INFO(message);
  CHECK(message.find("the file-size limit (ulimit -f) is 1048576 bytes, a checkpoint needs about 5000000") !=
        std::string::npos);
}
