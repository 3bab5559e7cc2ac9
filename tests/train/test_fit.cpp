// app::fit, the library's training loop: it learns; a run interrupted after
// a checkpoint and resumed ends exactly like one that never stopped (losses,
// the metrics CSV, early stopping's count); early stopping stops when the
// validation loss stops falling and stays stopped on resume; the CSV keeps
// only whole lines of epochs the checkpoint has; bad input is refused by name.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "support/checkpoint_edits.hpp"
#include "support/fusor_test.hpp"

#include <fusor/app/fit.hpp>
#include <fusor/core/stream_binding.hpp>
#include <fusor/data/fashion_mnist.hpp>
#include <fusor/data/loader.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_fit {

using namespace fusor;
using namespace fusor_test;

namespace {
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 32, nn::relu>, nn::linear<32, 10>>;
using network_t = nn::network<mlp, fp32, space>;
using trainer_t = optim::trainer<network_t, optim::adamw>;

const data::labelled_images& train_slice() {
  static const data::labelled_images s = data::take_first(data::load_fashion_mnist(data::split::train), 1024);
  return s;
}
const data::labelled_images& test_slice() {
  static const data::labelled_images s = data::take_first(data::load_fashion_mnist(data::split::test), 512);
  return s;
}

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_fit_" FUSOR_TEST_EXECUTOR_NAME) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<std::string> lines_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The CSV line without its last two columns (samples/s and seconds vary between runs).
std::string figures_of(const std::string& line) {
  std::string cut = line;
  for (int i = 0; i < 2; ++i) cut = cut.substr(0, cut.rfind(','));
  return cut;
}

// The stream fit runs on. On the GPU a created one: fit captures its steps into a CUDA graph, which the
// legacy default stream cannot hold (with `default_stream`, fit runs them one by one there).
struct fit_stream {
#if defined(FUSOR_TEST_CUDA)
  explicit fit_stream(bool default_stream) {
    if (!default_stream) ex.stream = created.emplace().stream;
  }
  std::optional<created_stream> created;
#else
  explicit fit_stream(bool) {}
#endif
  executor ex{};
};

// A fresh network, trainer and loaders (seed 7) fitted with `o` (4 epochs' schedule, whatever o.epochs).
// `batch_size` below 128 with drop_last false leaves a last batch smaller than the others.
// `train_set` and `test_set`, where given, replace the usual slices.
app::fit_result run_fit(app::fit_options o, const app::fit_hooks& hooks = {}, float learning_rate = 3e-3f,
                        bool default_stream = false, index_t batch_size = 128,
                        const data::labelled_images* train_set = nullptr,
                        const data::labelled_images* test_set = nullptr) {
  const fit_stream on(default_stream);  // first: outlives everything that queues work on it
  const executor& ex = on.ex;
  const stream_t stream = executor_stream(ex);
  network_t net(128, {.seed = 7, .stream = stream});
  trainer_t trainer(net,
                    {.schedule = optim::learning_rate_schedule::warmup_cosine(learning_rate, 2, 8 * 4), .stream = stream},
                    optim::adamw_options{.weight_decay = 0.01f});
  trainer.initialize(ex);
  const data::loader_options train_options{.batch_size = batch_size, .seed = 5, .drop_last = batch_size == 128,
                                           .mean = 0.286f, .std = 0.353f};
  data::loader_options test_options = train_options;
  test_options.shuffle = false;
  test_options.drop_last = false;
  data::loader<space> train(train_set ? *train_set : train_slice(), train_options, stream);
  data::loader<space> test(test_set ? *test_set : test_slice(), test_options, stream);
  o.progress = false;
  o.report = false;
  return app::fit(trainer, train, test, ex, o, hooks);
}
}  // namespace

FUSOR_TEST_CASE("fit: trains, reports every epoch, and writes one CSV line per epoch with the reported figures") {
  const auto dir = scratch("learns");
  std::vector<int> started, ended;
  const app::fit_result r = run_fit({.epochs = 4, .metrics = dir / "m.csv"},
                                    {.on_start = [&](int resumed_after) { started.push_back(resumed_after); },
                                     .on_epoch = [&](const app::epoch_result& e) { ended.push_back(e.epoch); }});
  CHECK(started == std::vector<int>{0});
  CHECK(ended == std::vector<int>{1, 2, 3, 4});
  REQUIRE(r.epochs.size() == 4);
  for (int e = 0; e < 4; ++e) {
    CHECK(r.epochs[std::size_t(e)].epoch == e + 1);
    CHECK(r.epochs[std::size_t(e)].train.samples == 1024);
    CHECK(r.epochs[std::size_t(e)].validation.samples == 512);
  }
  CHECK(r.epochs[3].validation.mean_loss < r.epochs[0].validation.mean_loss);
  CHECK(r.epochs[3].validation.accuracy > 0.6);
  CHECK(r.validation.mean_loss == r.epochs[3].validation.mean_loss);
  CHECK(r.resumed_after == 0);
  CHECK(!r.stopped_early);
  const auto lines = lines_of(dir / "m.csv");
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == app::metrics_header);
  double loss = 0;
  int epoch = 0;
  REQUIRE(std::sscanf(lines[4].c_str(), "%d,%*f,%*f,%lf", &epoch, &loss) == 2);
  CHECK(epoch == 4);
  CHECK(loss == doctest::Approx(r.epochs[3].validation.mean_loss).epsilon(1e-5));
}

#if defined(FUSOR_TEST_CUDA)
TEST_CASE("[cuda] fit: on the default stream the steps run one by one, with the graph's losses") {
  const app::fit_result graph = run_fit({.epochs = 2});
  const app::fit_result eager = run_fit({.epochs = 2}, {}, 3e-3f, true);
  REQUIRE(graph.epochs.size() == 2);
  REQUIRE(eager.epochs.size() == 2);
  for (std::size_t e = 0; e < 2; ++e) {
    CHECK(eager.epochs[e].train.mean_loss == doctest::Approx(graph.epochs[e].train.mean_loss).epsilon(1e-6));
    CHECK(eager.epochs[e].validation.mean_loss ==
          doctest::Approx(graph.epochs[e].validation.mean_loss).epsilon(1e-6));
  }
}
#endif

FUSOR_TEST_CASE("fit: a last batch smaller than the others is trained (on the GPU eagerly, beside the graph)") {
  const app::fit_result r = run_fit({.epochs = 2}, {}, 3e-3f, false, 100);  // 10 batches of 100, then 24
  REQUIRE(r.epochs.size() == 2);
  for (const app::epoch_result& e : r.epochs) CHECK(e.train.samples == 1024);
#if defined(FUSOR_TEST_CUDA)
  const app::fit_result eager = run_fit({.epochs = 2}, {}, 3e-3f, true, 100);
  for (std::size_t e = 0; e < 2; ++e)
    CHECK(eager.epochs[e].train.mean_loss == doctest::Approx(r.epochs[e].train.mean_loss).epsilon(1e-6));
#endif
}

FUSOR_TEST_CASE("fit: stopped after a checkpoint and resumed, a run ends exactly like one that never stopped") {
  const auto dir = scratch("resume");
  const app::fit_result straight = run_fit({.epochs = 4, .metrics = dir / "straight.csv"});
  const app::fit_options halves{.epochs = 4, .checkpoint = dir / "c.safetensors", .resume = true,
                                .metrics = dir / "halves.csv"};
  app::fit_options first = halves;
  first.epochs = 2;
  const app::fit_result a = run_fit(first);
  // A crash after epoch 3's CSV line but before its checkpoint, mid-way through a line: both must go.
  {
    std::ofstream csv(dir / "halves.csv", std::ios::app);
    csv << "3,9.9,0.1,9.9,0.1,1.0,1.0\n4,9.9";
  }
  const app::fit_result b = run_fit(halves);
  REQUIRE(a.epochs.size() == 2);
  REQUIRE(b.epochs.size() == 2);
  CHECK(b.resumed_after == 2);
  CHECK(b.epochs[0].epoch == 3);
  CHECK(a.epochs[1].validation.mean_loss == straight.epochs[1].validation.mean_loss);
  CHECK(b.epochs[0].train.mean_loss == straight.epochs[2].train.mean_loss);  // bit for bit
  CHECK(b.epochs[1].validation.mean_loss == straight.epochs[3].validation.mean_loss);
  CHECK(b.best_epoch == straight.best_epoch);
  const auto s = lines_of(dir / "straight.csv"), h = lines_of(dir / "halves.csv");
  REQUIRE(h.size() == s.size());
  for (std::size_t i = 0; i < s.size(); ++i) CHECK(figures_of(h[i]) == figures_of(s[i]));

  // Resumed after the last epoch: nothing trains, the verdict is the saved network's.
  const app::fit_result c = run_fit(halves);
  CHECK(c.epochs.empty());
  CHECK(c.resumed_after == 4);
  CHECK(c.validation.mean_loss == straight.validation.mean_loss);
}

FUSOR_TEST_CASE("fit: early stopping ends the run after `patience` epochs without a lower validation loss") {
  const auto dir = scratch("early");
  // min_improvement beyond any loss: only the first epoch (from +inf) counts as an improvement.
  const app::fit_options o{.epochs = 6, .checkpoint = dir / "c.safetensors", .resume = true,
                           .best_checkpoint = dir / "best.safetensors", .patience = 2, .min_improvement = 1e6};
  const app::fit_result r = run_fit(o);
  REQUIRE(r.epochs.size() == 3);  // epoch 1 improves, 2 and 3 do not: stop
  CHECK(r.stopped_early);
  CHECK(r.best_epoch == 1);
  CHECK(r.best_validation_loss == r.epochs[0].validation.mean_loss);
  CHECK(std::filesystem::exists(dir / "best.safetensors"));
  CHECK(io::checkpoint_reader(dir / "best.safetensors").metadata_number<int>("epoch") == 1);
  CHECK(io::checkpoint_reader(dir / "c.safetensors").metadata_number<int>("epoch") == 3);

  // Resumed, it stays stopped: the count of epochs without improvement is in the checkpoint.
  const app::fit_result again = run_fit(o);
  CHECK(again.epochs.empty());
  CHECK(again.stopped_early);
  CHECK(again.best_epoch == 1);

  // Without a bar too high, a falling loss trains every epoch.
  const app::fit_result falling = run_fit({.epochs = 3, .patience = 1});
  CHECK(falling.epochs.size() == 3);
  CHECK(!falling.stopped_early);
}

FUSOR_TEST_CASE("fit: an empty training or validation set is refused before anything is written") {
  // Else an empty validation set reports a loss and accuracy of 0 as if measured, and an empty training set
  // "trains" epochs of nothing.
  const auto dir = scratch("empty");
  const data::labelled_images none = data::take_first(test_slice(), 0);
  const data::labelled_images too_few = data::take_first(train_slice(), 127);  // under one batch, drop_last
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 1, .metrics = dir / "m.csv"}, {}, 3e-3f, false, 128, nullptr, &none),
                       doctest::Contains("the test loader yields no batch"), app::usage_error);
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 1, .metrics = dir / "m.csv"}, {}, 3e-3f, false, 128, &too_few),
                       doctest::Contains("the training loader yields no batch"), app::usage_error);
  CHECK(!std::filesystem::exists(dir / "m.csv"));
}

FUSOR_TEST_CASE("fit: a checkpoint beyond the epochs asked for, a foreign metrics file and bad counts are refused") {
  const auto dir = scratch("refusals");
  run_fit({.epochs = 2, .checkpoint = dir / "c.safetensors"});
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 1, .checkpoint = dir / "c.safetensors", .resume = true}),
                       doctest::Contains("was saved after epoch 2, beyond the 1 epochs asked for"), app::usage_error);
  {
    std::ofstream other(dir / "other.csv");
    other << "step,loss\n1,2.5\n";
  }
  CHECK_THROWS_WITH(run_fit({.epochs = 3, .checkpoint = dir / "c.safetensors", .resume = true,
                             .metrics = dir / "other.csv"}),
                    doctest::Contains("other.csv' does not start with the header"));
  CHECK(lines_of(dir / "other.csv").size() == 2);  // left as it was
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .resume = true}), doctest::Contains("resume needs a checkpoint"),
                       app::usage_error);
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .patience = -1}), doctest::Contains("patience is -1"), app::usage_error);
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .min_improvement = std::nan("")}),
                       doctest::Contains("min_improvement is nan"), app::usage_error);
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .min_improvement = -0.5}), doctest::Contains("min_improvement is -0.5"),
                       app::usage_error);
  // Two saves into one file, however spelled: refused before training.
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .checkpoint = dir / "same", .metrics = dir / "." / "same"}),
                       doctest::Contains("checkpoint and metrics are the same file"), app::usage_error);
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .checkpoint = dir / "c2", .best_checkpoint = dir / "c2"}),
                       doctest::Contains("checkpoint and best_checkpoint are the same file"), app::usage_error);
  CHECK(!std::filesystem::exists(dir / "same"));
  // A best checkpoint that cannot be written is refused before the first epoch, as the checkpoint is: otherwise
  // the checkpoint would name an epoch as the best whose network was never saved.
  std::vector<int> epochs_run;
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 2, .checkpoint = dir / "c3", .best_checkpoint = dir / "missing" / "best"},
                               {.on_epoch = [&](const app::epoch_result& e) { epochs_run.push_back(e.epoch); }}),
                       doctest::Contains("missing' does not exist"), io::checkpoint_error);
  CHECK(epochs_run.empty());
  CHECK(!std::filesystem::exists(dir / "c3"));
  // Early stopping's state, damaged in a checkpoint's metadata: named by its key.
  io::checkpoint_reader saved(dir / "c.safetensors");
  for (const char* bad : {"abc", "0.5garbage"}) {
    io::safetensors_file edited = saved.contents();
    edited.metadata["fit.best_validation_loss"] = bad;
    fusor_test::write_edited(edited, dir / "bad.safetensors", [](io::tensor_record&) { return true; });
    CHECK_THROWS_WITH_AS(run_fit({.epochs = 3, .checkpoint = dir / "bad.safetensors", .resume = true}),
                         doctest::Contains("metadata 'fit.best_validation_loss'"), io::checkpoint_error);
  }
  io::safetensors_file missing = saved.contents();
  missing.metadata.erase("fit.best_validation_loss");
  fusor_test::write_edited(missing, dir / "bad.safetensors", [](io::tensor_record&) { return true; });
  CHECK_THROWS_WITH_AS(run_fit({.epochs = 3, .checkpoint = dir / "bad.safetensors", .resume = true}),
                       doctest::Contains("fit.best_validation_loss"), io::checkpoint_error);
}

FUSOR_TEST_CASE("fit: labels outside the network's classes are refused by name, not reported as a NaN loss") {
  // A network of 8 outputs for Fashion-MNIST's 10 classes: labels 8 and 9 lie outside.
  using narrow_mlp = nn::sequential<nn::features<784>, nn::linear<784, 8>>;
  using narrow_network = nn::network<narrow_mlp, fp32, space>;
  const executor ex{};
  const stream_t stream = executor_stream(ex);
  narrow_network net(128, {.seed = 7, .stream = stream});
  optim::trainer<narrow_network, optim::adamw> trainer(net, {.stream = stream}, optim::adamw_options{});
  trainer.initialize(ex);
  data::loader<space> test(test_slice(), {.batch_size = 128, .shuffle = false}, stream);
  index_t outside = 0;
  for (const std::int32_t label : test_slice().labels) outside += label >= 8;
  REQUIRE(outside > 0);
  expect_error<error>([&] { app::evaluate(trainer, test, ex); },
                      {("fusor::app::evaluate: " + std::to_string(outside) + " of 512 labels lie outside").c_str()});
}

}  // namespace test_fit
