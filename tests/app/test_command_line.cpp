// fusor::app::command_line: strict numbers in range, every mistake a
// usage_error naming the option, the text and what is accepted; --help and the
// Markdown table generated from the same declarations. io::parse_number and
// io::metadata_number: the strict reading both rest on.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fusor/app/command_line.hpp>
#include <fusor/io/checkpoint.hpp>

#include "support/fusor_test.hpp"

namespace app = fusor::app;
namespace fio = fusor::io;
using fusor_test::expect_error;

namespace {

enum class schedule { gpipe, one_forward_one_backward };

// The options of a typical training program, bound to one struct.
struct settings {
  int epochs = 10;
  long long batch = 128;
  float lr = 1e-3f;
  double accuracy = 0;
  std::uint64_t seed = 1;
  std::optional<int> rank;
  std::vector<unsigned> stages{0};
  std::string device = "auto";
  std::string prompt = "\n";
  std::filesystem::path data = "/data";
  schedule order = schedule::one_forward_one_backward;
  bool quiet = false, graph = true;
  int zero = 0;

  app::command_line options() {
    app::command_line cli("Trains something.");
    cli.number("--epochs", epochs, "epochs", app::between(1, 100000))
        .number("--batch", batch, "batch size", app::at_least(1LL))
        .number("--lr", lr, "learning rate", app::above(0.f))
        .number("--require-accuracy", accuracy, "required test accuracy", app::between(0.0, 1.0))
        .number("--seed", seed, "seed")
        .number("--rank", rank, "PowerSGD rank", app::at_least(1))
        .numbers("--stage-map", stages, "first layer of each stage", app::at_least(0u))
        .choice("--device", device, {"auto", "host", "cuda"}, "where to train")
        .text("--prompt", prompt, "start of generation", "TEXT", false)
        .path("--data", data, "data set folder", "DIR")
        .choice("--schedule", order, {{"gpipe", schedule::gpipe}, {"1f1b", schedule::one_forward_one_backward}},
                "pipeline schedule")
        .flag("--quiet", quiet, "no progress bar")
        .flag("--no-graph", graph, "no CUDA graph", false)
        .action("--zero", "shard the optimizer state", [this] { zero = 1; });
    return cli;
  }
};

// Parses `args` (after the program's name) into a fresh settings.
settings parse(std::initializer_list<const char*> args, bool* help = nullptr) {
  settings s;
  std::vector<const char*> argv{"trainer"};
  argv.insert(argv.end(), args.begin(), args.end());
  app::command_line cli = s.options();
  const bool go_on = cli.parse(int(argv.size()), argv.data());
  if (help) *help = !go_on;
  return s;
}

void expect_usage_error(std::initializer_list<const char*> args, std::initializer_list<const char*> parts) {
  INFO("arguments: ", [&] {
    std::string joined;
    for (const char* a : args) joined += std::string(a) + " ";
    return joined;
  }());
  expect_error<app::usage_error>([&] { parse(args); }, parts);
}

}  // namespace

TEST_CASE("parse_number reads the whole text as the type, or says why not") {
  CHECK(fio::parse_number<int>("42").value == 42);
  CHECK(fio::parse_number<int>("-7").value == -7);
  CHECK(fio::parse_number<float>("2.5e-3").value == doctest::Approx(2.5e-3f));
  CHECK(fio::parse_number<double>("-0.25").value == -0.25);
  CHECK(fio::parse_number<std::uint64_t>("18446744073709551615").value == std::numeric_limits<std::uint64_t>::max());
  for (const char* bad : {"", "1x", " 3", "3 ", "+2", "0x10", "abc", "1.5", "--1", "1,2"})
    CHECK_MESSAGE(fio::parse_number<int>(bad).fault == fio::number_fault::not_a_number, "'", bad, "'");
  CHECK(fio::parse_number<unsigned>("-1").fault == fio::number_fault::not_a_number);
  CHECK(fio::parse_number<int>("99999999999").fault == fio::number_fault::beyond_the_type);
  CHECK(fio::parse_number<float>("1e99").fault == fio::number_fault::beyond_the_type);
  for (const char* bad : {"nan", "inf", "-inf", "NaN", "infinity"})
    CHECK_MESSAGE(fio::parse_number<float>(bad).fault == fio::number_fault::not_finite, bad);
  CHECK(fio::number_fault_text<int>("1x", fio::number_fault::not_a_number) == "'1x' is not a whole number");
  CHECK(fio::number_fault_text<std::int8_t>("300", fio::number_fault::beyond_the_type) ==
        "'300' is beyond this value's range (-128 to 127)");
}

TEST_CASE("command_line binds every kind of option, as '--name value' and '--name=value'") {
  const settings s = parse({"--epochs", "3", "--batch=256", "--lr", "0.01", "--require-accuracy", "0.85", "--seed",
                            "18446744073709551615", "--rank", "4", "--stage-map", "0,2,3", "--device", "cuda", "--prompt",
                            "", "--data", "/tmp/x", "--schedule", "gpipe", "--quiet", "--no-graph", "--zero", "--epochs",
                            "5"});
  CHECK(s.epochs == 5);  // given twice: the last wins
  CHECK(s.batch == 256);
  CHECK(s.lr == doctest::Approx(0.01f));
  CHECK(s.accuracy == 0.85);
  CHECK(s.seed == std::numeric_limits<std::uint64_t>::max());
  REQUIRE(s.rank.has_value());
  CHECK(*s.rank == 4);
  CHECK(s.stages == std::vector<unsigned>{0, 2, 3});
  CHECK(s.device == "cuda");
  CHECK(s.prompt.empty());
  CHECK(s.data == "/tmp/x");
  CHECK(s.order == schedule::gpipe);
  CHECK(s.quiet);
  CHECK_FALSE(s.graph);
  CHECK(s.zero == 1);

  const settings untouched = parse({});
  CHECK(untouched.epochs == 10);
  CHECK_FALSE(untouched.rank.has_value());
  CHECK(untouched.graph);
  CHECK(untouched.order == schedule::one_forward_one_backward);
}

TEST_CASE("command_line refuses each mistake, naming the option, the text and what is accepted") {
  expect_usage_error({"--epochs", "abc"}, {"--epochs abc: 'abc' is not a whole number (accepted: 1 to 100000)"});
  expect_usage_error({"--epochs", "1x"}, {"--epochs 1x", "not a whole number"});
  expect_usage_error({"--epochs", "0"}, {"--epochs 0: out of range (accepted: 1 to 100000)"});
  expect_usage_error({"--epochs", "99999999999"}, {"--epochs", "beyond this value's range"});
  expect_usage_error({"--batch", "-5"}, {"--batch -5: out of range (accepted: 1 or more)"});
  expect_usage_error({"--lr", "nan"}, {"--lr nan: 'nan' is not finite (accepted: above 0)"});
  expect_usage_error({"--lr", "-1"}, {"--lr -1: out of range (accepted: above 0)"});
  expect_usage_error({"--lr", "0"}, {"--lr 0: out of range", "above 0"});
  expect_usage_error({"--lr", "inf"}, {"not finite"});
  expect_usage_error({"--require-accuracy", "1.5"}, {"--require-accuracy 1.5", "0 to 1"});
  expect_usage_error({"--seed", "-1"}, {"--seed -1", "whole number, 0 or more"});
  expect_usage_error({"--rank", "0"}, {"--rank 0: out of range (accepted: 1 or more)"});
  expect_usage_error({"--stage-map", "0,x"}, {"--stage-map 0,x: 'x' is not a whole number, 0 or more"});
  expect_usage_error({"--stage-map", "0,,2"}, {"--stage-map", "'' is not a whole number"});
  expect_usage_error({"--device", "gpu"}, {"--device gpu: 'gpu' is not one of auto|host|cuda"});
  expect_usage_error({"--schedule", "zigzag"}, {"not one of gpipe|1f1b"});
  expect_usage_error({"--data", ""}, {"--data", "empty path"});
  expect_usage_error({"--epochs"}, {"--epochs needs a value: N, 1 to 100000"});
  expect_usage_error({"--data", "--quiet"}, {"--data needs a value: DIR"});
  expect_usage_error({"--quiet=yes"}, {"--quiet takes no value (given 'yes')"});
  expect_usage_error({"--epoch", "2"}, {"unknown option --epoch (did you mean --epochs?); --help lists them"});
  expect_usage_error({"--frobnicate"}, {"unknown option --frobnicate; --help lists them"});
  expect_usage_error({"epochs"}, {"unexpected argument 'epochs'"});
}

TEST_CASE("--help and the Markdown table come from the same declarations") {
  settings s;
  app::command_line cli = s.options();
  cli.epilogue("exit status: 0 done, 2 the command line");
  const std::string help = cli.help();
  INFO(help);
  CHECK(help.find("usage: program [options]\nTrains something.\n") == 0);
  for (const char* line : {"  --epochs N ", "epochs (default 10; 1 to 100000)\n", "--lr X ",
                           "learning rate (default 0.001; above 0)\n", "--rank N ", "PowerSGD rank (1 or more)\n",
                           "--stage-map N,N,... ", "(default 0; each 0 or more)\n", "--device auto|host|cuda ",
                           "where to train (default auto)\n", "--schedule gpipe|1f1b ", "(default 1f1b)\n",
                           "--data DIR ", "(default /data)\n", "start of generation (default '\\n')\n", "  --quiet ", "no progress bar\n", "  --help ",
                           "\nexit status: 0 done, 2 the command line\n"})
    CHECK_MESSAGE(help.find(line) != std::string::npos, "expected: ", std::string(line));
  // Every option's description starts in the same column.
  std::size_t column = 0;
  for (std::size_t at = help.find("\n  --"); at != std::string::npos; at = help.find("\n  --", at + 1)) {
    const std::size_t line_end = help.find('\n', at + 1);
    const std::string line = help.substr(at + 1, line_end - at - 1);
    const std::size_t text = line.find_first_not_of(' ', line.find("  ", 2));
    if (column == 0) column = text;
    CHECK_MESSAGE(text == column, line);
  }

  const std::string table = cli.markdown();
  CHECK(table.find("| option | meaning | default | accepted |\n|---|---|---|---|\n") == 0);
  CHECK(table.find("| `--epochs N` | epochs | 10 | 1 to 100000 |\n") != std::string::npos);
  CHECK(table.find("| `--device auto\\|host\\|cuda` | where to train | auto |  |\n") != std::string::npos);

  expect_usage_error({"--epochs", "x", "--help"}, {"--epochs x"});  // a mistake before --help is still one
}

TEST_CASE("--help stops parsing and reports it") {
  bool help_given = false;
  const settings s = parse({"--epochs", "4", "--help", "--epochs", "nonsense"}, &help_given);
  CHECK(help_given);
  CHECK(s.epochs == 4);
  parse({"--quiet"}, &help_given);
  CHECK_FALSE(help_given);
  // A process that is not to print (rank 1 of a job) stops at --help all the same.
  int epochs = 3;
  const char* argv[] = {"trainer", "--help", "--epochs", "7"};
  CHECK_FALSE(app::command_line().number("--epochs", epochs, "epochs").print_help(false).parse(4, argv));
  CHECK(epochs == 3);
}

TEST_CASE("a program that declares an option twice, or a malformed name, is told so") {
  int a = 0;
  app::command_line cli;
  cli.number("--a", a, "a");
  expect_error<fusor::error>([&] { cli.number("--a", a, "again"); }, {"option --a declared twice"});
  expect_error<fusor::error>([&] { cli.number("a", a, "no dashes"); }, {"start with --"});
  expect_error<fusor::error>([&] { cli.number("--a=b", a, "equals"); }, {"no '='"});
  expect_error<fusor::error>([&] { cli.number("--help", a, "help"); }, {"--help is built in"});
}

TEST_CASE("metadata_number names the file, the key and what it found") {
  const std::filesystem::path file = "run/ckpt.safetensors";
  const std::map<std::string, std::string> metadata{{"epoch", "3"}, {"step", "12x"}, {"lr", "nan"}};
  CHECK(fio::metadata_number<int>(metadata, "epoch", file) == 3);
  expect_error<fio::checkpoint_error>([&] { fio::metadata_number<int>(metadata, "steps", file); },
                                      {"'run/ckpt.safetensors' has no metadata 'steps'", "'epoch', 'lr', 'step'"});
  expect_error<fio::checkpoint_error>([&] { fio::metadata_number<long>(metadata, "step", file); },
                                      {"'run/ckpt.safetensors': metadata 'step' should be a whole number, but '12x' is not"});
  expect_error<fio::checkpoint_error>([&] { fio::metadata_number<double>(metadata, "lr", file); },
                                      {"metadata 'lr' should be a finite number, but 'nan' is not finite"});
}
