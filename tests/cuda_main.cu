// The CUDA test binary's entry point. Without a GPU nothing here can run: it
// says so and exits with 77, which CTest reports as skipped, never as passed.
// Questions that run no test (--count, --list-test-cases, --list-test-suites,
// --help, --version) are answered with or without one.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

#include <fusor/core/cuda_runtime.hpp>

namespace {
// Whether the command line asks doctest only to list or count (doctest's
// options, short or long, with or without its "dt-" prefix).
bool asks_without_running(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg(argv[i]);
    arg.remove_prefix(arg.find_first_not_of('-') == std::string_view::npos ? arg.size() : arg.find_first_not_of('-'));
    if (arg.starts_with("dt-")) arg.remove_prefix(3);
    arg = arg.substr(0, arg.find('='));
    for (std::string_view query : {"count", "c", "list-test-cases", "ltc", "list-test-suites", "lts", "help", "h", "?",
                                   "version", "v"})
      if (arg == query) return true;
  }
  return false;
}
}  // namespace

int main(int argc, char** argv) {
  if (!fusor::gpu::available() && !asks_without_running(argc, argv)) {
    std::printf("skipped: no GPU (the CUDA tests were compiled but cannot run here)\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
