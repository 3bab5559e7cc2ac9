// optim::trainer end to end: training resumed from a checkpoint repeats the
// losses of uninterrupted training exactly; a short run on a slice of
// Fashion-MNIST learns (its loss falls below a stated bound); pruned weights
// stay zero, and a resumed run keeps pruning; fp16 with dynamic loss scaling
// skips a step with an overflow.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "support/checkpoint_edits.hpp"
#include "support/fusor_test.hpp"

#include <fusor/data/fashion_mnist.hpp>
#include <fusor/data/loader.hpp>
#include <fusor/nn/branches.hpp>
#include <fusor/nn/dropout.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/recompute.hpp>
#include <fusor/nn/residual.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/sgd.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/optim/training_checkpoint.hpp>
#if defined(FUSOR_TEST_CUDA)
#include <fusor/graph/capture.hpp>
#endif

using namespace fusor;
using namespace fusor_test;

namespace {
using mlp = nn::sequential<nn::features<784>, nn::linear<784, 64, nn::relu>, nn::linear<64, 10>>;
using network_t = nn::network<mlp, fp32, space>;
using trainer_t = optim::trainer<network_t, optim::adamw>;

const data::labelled_images& slice() {
  static const data::labelled_images s = data::take_first(data::load_fashion_mnist(data::split::train), 2048);
  return s;
}

optim::trainer_options schedule(index_t total_steps) {
  return {.schedule = optim::learning_rate_schedule::warmup_cosine(2e-3f, 4, total_steps)};
}

// The mean loss of each epoch of `epochs`, from epoch `first` (a fresh network
// when `resume_from` is empty, else the checkpoint), saving after the last.
std::vector<double> train_epochs(int first, int epochs, const std::filesystem::path& resume_from,
                                 const std::filesystem::path& save_to) {
  executor ex{};
  network_t net(128, {.seed = 3});
  const data::loader_options lo{.batch_size = 128, .seed = 5, .drop_last = true, .mean = 0.286f, .std = 0.353f};
  trainer_t trainer(net, schedule(16 * 4), optim::adamw_options{.weight_decay = 0.01f});
  trainer.initialize(ex);
  if (!resume_from.empty()) optim::load_training_state(resume_from, trainer);
  data::loader<space> loader(slice(), lo);
  std::vector<double> losses;
  for (int e = first; e < first + epochs; ++e) {
    trainer.loss().reset(ex);
    loader.start_epoch(std::uint64_t(e));
    while (const auto* b = loader.next()) trainer.step(b->images, b->labels, ex);
    losses.push_back(trainer.loss().totals().mean_loss);
  }
  if (!save_to.empty()) optim::save_training_state(save_to, trainer, {{"epoch", std::to_string(first + epochs)}});
  return losses;
}
}  // namespace

FUSOR_TEST_CASE("trainer: resumed from a checkpoint, training repeats the uninterrupted losses exactly") {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_resume_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  const std::vector<double> straight = train_epochs(0, 4, {}, {});
  const std::vector<double> first_half = train_epochs(0, 2, {}, dir / "half.safetensors");
  const std::vector<double> second_half = train_epochs(2, 2, dir / "half.safetensors", {});
  REQUIRE(straight.size() == 4);
  CHECK(first_half[0] == straight[0]);
  CHECK(first_half[1] == straight[1]);
  CHECK(second_half[0] == straight[2]);  // bit for bit: same data order, same state
  CHECK(second_half[1] == straight[3]);
  CHECK(straight[3] < straight[0]);
  std::filesystem::remove_all(dir);
}

namespace {
std::vector<char> file_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
}  // namespace

FUSOR_TEST_CASE("trainer: a damaged training state is refused with the tensor and the value named, the trainer unchanged") {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_damaged_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  train_epochs(0, 1, {}, dir / "good.safetensors");
  const io::safetensors_file good = io::checkpoint_reader(dir / "good.safetensors").contents();
  std::string first_moment, second_moment;
  for (const auto& t : good.tensors) {
    if (t.name.ends_with(".exp_avg")) first_moment = t.name;
    if (t.name.ends_with(".exp_avg_sq")) second_moment = t.name;
  }
  REQUIRE(!first_moment.empty());
  REQUIRE(!second_moment.empty());
  struct damage {
    const char* what;
    std::string tensor;
    index_t element;
    double value;  // NaN for a removed tensor
    std::vector<const char*> named;  // none: a value a trainer can save, which loads
  };
  const double nan = std::nan("");
  const damage cases[] = {
      {"a NaN weight", "0.weight", 5, nan, {"'0.weight' element 5 is nan", "finite"}},
      {"an infinite bias", "1.bias", 0, HUGE_VAL, {"'1.bias' element 0 is inf"}},
      {"a negative step", "controller.step", 0, -1, {"'controller.step' is -1", "0 to the steps taken (16"}},
      {"a step beyond the steps taken", "controller.step", 0, 17, {"'controller.step' is 17"}},
      {"a zero loss scale", "controller.loss_scale", 0, 0, {"'controller.loss_scale' is 0", "above 0"}},
      {"a negative second moment", second_moment, 3, -4, {"element 3 is -4", "0 or more"}},
      {"a tensor missing", second_moment, 0, nan, {"exp_avg_sq"}},
      {"a negative first moment (a mean of gradients)", first_moment, 3, -4, {}},
  };
  for (const damage& d : cases) {
    INFO(d.what);
    write_edited(good, dir / "damaged.safetensors", [&](io::tensor_record& t) {
      if (t.name != d.tensor) return true;
      if (d.what == std::string("a tensor missing")) return false;
      set_element(t, d.element, d.value);
      return true;
    });

    executor ex{};
    network_t net(128, {.seed = 9});
    trainer_t trainer(net, schedule(8), optim::adamw_options{});
    trainer.initialize(ex);
    optim::save_training_state(dir / "before.safetensors", trainer);
    if (d.named.empty()) {
      optim::load_training_state(dir / "damaged.safetensors", trainer);
      optim::save_training_state(dir / "after.safetensors", trainer);
      CHECK(io::checkpoint_reader(dir / "after.safetensors").contents().find(d.tensor)->value(d.element) == d.value);
      continue;
    }
    try {
      optim::load_training_state(dir / "damaged.safetensors", trainer);
      FAIL_CHECK("the damaged state was loaded");
    } catch (const io::checkpoint_error& e) {
      const std::string message = e.what();
      INFO("message: ", message);
      CHECK(message.find("damaged.safetensors") != std::string::npos);
      for (const char* part : d.named) CHECK_MESSAGE(message.find(part) != std::string::npos, "expected: ", part);
    }
    // Nothing was copied: the trainer saves the same bytes as before the attempt.
    optim::save_training_state(dir / "after.safetensors", trainer);
    CHECK(file_bytes(dir / "after.safetensors") == file_bytes(dir / "before.safetensors"));
  }
  std::filesystem::remove_all(dir);
}

FUSOR_TEST_CASE("trainer: a training state holding tensors the trainer does not read is refused, unless told to ignore them") {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_unread_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  train_epochs(0, 1, {}, dir / "adamw.safetensors");  // AdamW's moments beside the parameters
  const io::safetensors_file saved = io::checkpoint_reader(dir / "adamw.safetensors").contents();
  // Plain SGD keeps no state: AdamW's two moments per group are what it does not read.
  using sgd_trainer = optim::trainer<network_t, optim::sgd>;
  executor ex{};
  network_t net(128, {.seed = 9});
  sgd_trainer trainer(net, schedule(8), optim::sgd_options{});
  trainer.initialize(ex);
  optim::save_training_state(dir / "before.safetensors", trainer);
  expect_error<io::checkpoint_error>([&] { optim::load_training_state(dir / "adamw.safetensors", trainer); },
                                     {"adamw.safetensors", "2 tensors that this trainer does not read",
                                      ".exp_avg'", ".exp_avg_sq'", "unread_tensors::ignore"});
  optim::save_training_state(dir / "after.safetensors", trainer);
  CHECK(file_bytes(dir / "after.safetensors") == file_bytes(dir / "before.safetensors"));

  // Told to ignore them, it loads the rest: every parameter and step scalar as saved.
  optim::load_training_state(dir / "adamw.safetensors", trainer, optim::unread_tensors::ignore);
  CHECK(trainer.steps_taken() == 16);
  optim::save_training_state(dir / "after.safetensors", trainer);
  const io::safetensors_file loaded = io::checkpoint_reader(dir / "after.safetensors").contents();
  REQUIRE(loaded.tensors.size() + 2 == saved.tensors.size());
  for (const io::tensor_record& t : loaded.tensors) {
    INFO(t.name);
    REQUIRE(saved.find(t.name) != nullptr);
    CHECK(t.bytes == saved.find(t.name)->bytes);
  }

  // load_parameters reads a training state's parameters and passes over its optimizer and step state.
  network_t fresh(128, {.seed = 11});
  optim::load_parameters(dir / "adamw.safetensors", fresh);
  optim::save_parameters(dir / "parameters.safetensors", fresh);
  const io::checkpoint_reader parameters(dir / "parameters.safetensors");
  REQUIRE(parameters.contents().tensors.size() == 4);
  for (const io::tensor_record& t : parameters.contents().tensors) {
    INFO(t.name);
    REQUIRE(saved.find(t.name) != nullptr);
    CHECK(t.bytes == saved.find(t.name)->bytes);
  }
  std::filesystem::remove_all(dir);
}

FUSOR_TEST_CASE("training state: fusor's metadata is reserved and not returned; a dropout network of another seed, "
                "a larger network and a parameters file are refused with the cause named") {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_state_errors_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  executor ex{};
  network_t net(16, {.seed = 3});
  trainer_t trainer(net, schedule(8), optim::adamw_options{});
  trainer.initialize(ex);
  expect_error<error>([&] { optim::save_training_state(dir / "a.safetensors", trainer, {{"fusor.steps_taken", "0"}}); },
                      {"'fusor.steps_taken'", "reserved"});
  expect_error<error>([&] { optim::save_parameters(dir / "a.safetensors", net, {{"fusor.x", "1"}}); }, {"reserved"});
  CHECK(!std::filesystem::exists(dir / "a.safetensors"));
  // The metadata a load returns is the caller's alone, so it can be passed to the next save.
  optim::save_training_state(dir / "a.safetensors", trainer, {{"epoch", "2"}});
  const auto metadata = optim::load_training_state(dir / "a.safetensors", trainer);
  CHECK(metadata == std::map<std::string, std::string>{{"epoch", "2"}});
  optim::save_training_state(dir / "b.safetensors", trainer, metadata);
  optim::load_training_state(dir / "b.safetensors", trainer);

  // A parameters file is not a training state: the message says which loader reads it.
  optim::save_parameters(dir / "p.safetensors", net);
  expect_error<io::checkpoint_error>([&] { optim::load_training_state(dir / "p.safetensors", trainer); },
                                     {"not a training state", "load_parameters"});

  // A larger network's optimizer state is larger: the message names the layer the trainer does not read.
  using larger_mlp = nn::sequential<nn::features<784>, nn::linear<784, 64, nn::relu>, nn::linear<64, 10, nn::relu>,
                                    nn::linear<10, 10>>;
  using larger = nn::network<larger_mlp, fp32, space>;
  larger big(16, {.seed = 3});
  optim::trainer<larger, optim::adamw> big_trainer(big, schedule(8), optim::adamw_options{});
  big_trainer.initialize(ex);
  optim::save_training_state(dir / "larger.safetensors", big_trainer);
  optim::save_training_state(dir / "before.safetensors", trainer);
  expect_error<io::checkpoint_error>([&] { optim::load_training_state(dir / "larger.safetensors", trainer); },
                                     {"'optimizer.0.exp_avg'", "2 tensor(s) this trainer does not read, first '2.",
                                      "load_parameters"});
  optim::save_training_state(dir / "after.safetensors", trainer);
  CHECK(file_bytes(dir / "after.safetensors") == file_bytes(dir / "before.safetensors"));

  // Dropout draws its masks from the network's seed: another seed would not repeat the losses.
  using dropping = nn::network<nn::sequential<nn::features<784>, nn::linear<784, 64, nn::relu>, nn::dropout<10>,
                                              nn::linear<64, 10>>, fp32, space>;
  dropping first(16, {.seed = 3}), second(16, {.seed = 4});
  optim::trainer<dropping, optim::adamw> a(first, schedule(8), optim::adamw_options{}), b(second, schedule(8),
                                                                                          optim::adamw_options{});
  a.initialize(ex);
  b.initialize(ex);
  optim::save_training_state(dir / "dropout.safetensors", a);
  expect_error<io::checkpoint_error>([&] { optim::load_training_state(dir / "dropout.safetensors", b); },
                                     {"network of seed 3", "this one has seed 4", "{.seed = 3}"});

  // A composite draws random numbers only where a layer inside it does: a residual network without dropout (a GPT)
  // resumes under another seed, to sample from a checkpoint, say; one with dropout inside does not.
  using plain = nn::network<nn::sequential<nn::features<784>, nn::linear<784, 64>,
                                           nn::residual<nn::linear<64, 64, nn::relu>>, nn::linear<64, 10>>,
                            fp32, space>;
  using dropout_inside =
      nn::network<nn::sequential<nn::features<784>, nn::linear<784, 64>,
                                 nn::residual<nn::linear<64, 64, nn::relu>, nn::dropout<10>>, nn::linear<64, 10>>,
                  fp32, space>;
  using branch_dropout =
      nn::network<nn::sequential<nn::features<784>,
                                 nn::branches<nn::join_add, nn::linear<784, 10>,
                                              nn::chain<nn::dropout<10>, nn::linear<784, 10>>>>,
                  fp32, space>;
  using recomputed_plain =
      nn::network<nn::sequential<nn::features<784>, nn::recomputed<nn::chain<nn::linear<784, 10>>>>, fp32, space>;
  static_assert(!plain::draws_random_numbers && dropout_inside::draws_random_numbers);
  static_assert(branch_dropout::draws_random_numbers && !recomputed_plain::draws_random_numbers);
  plain three(16, {.seed = 3}), four(16, {.seed = 4});
  optim::trainer<plain, optim::adamw> t3(three, schedule(8), optim::adamw_options{}),
      t4(four, schedule(8), optim::adamw_options{});
  t3.initialize(ex);
  t4.initialize(ex);
  optim::save_training_state(dir / "plain.safetensors", t3);
  optim::load_training_state(dir / "plain.safetensors", t4);
  const auto loaded = to_host(four.group<float>().values()), saved = to_host(three.group<float>().values());
  CHECK(std::memcmp(loaded.data(), saved.data(), sizeof(float) * std::size_t(saved.size())) == 0);
  std::filesystem::remove_all(dir);
}

namespace {
// A trainer initialized, and its loader at the start of epoch 0.
struct ready_trainer {
  executor ex{};
  network_t net{128, {.seed = 4}};
  trainer_t trainer{net, schedule(8), optim::adamw_options{}};
  data::loader<space> loader{slice(), {.batch_size = 128, .seed = 2, .drop_last = true}};
  ready_trainer() {
    trainer.initialize(ex);
    loader.start_epoch(0);
  }
};
}  // namespace

FUSOR_TEST_CASE("trainer: labels outside the classes stop training with a message that names them") {
  ready_trainer r;
  [[maybe_unused]] auto& [ex, net, trainer, loader] = r;
  const auto* b = loader.next();
  // Three labels out of [0, 10): 12 first (in memory order), then -1 (not the ignore index, -100), then 10.
  host_tensor<std::int32_t, dextents<index_t, 1>> bad(128);
  copy(bad.view(), b->labels);
  bad(5) = 12, bad(40) = -1, bad(77) = 10;
  const auto labels = to_space(bad);
  std::string message;
  try {
    for (int step = 0; step < 8 && message.empty(); ++step) trainer.step(b->images, labels, ex);  // GPU: seen later
  } catch (const optim::nonfinite_error& e) {
    message = e.what();
  }
  INFO("message: ", message);
  CHECK(message.find("had Inf or NaN gradients") != std::string::npos);
  CHECK(message.find("3 of 128 are outside the classes [0, 10)") != std::string::npos);
  CHECK(message.find("ignore index (-100)") != std::string::npos);
  CHECK(message.find("the first is 12, element 5") != std::string::npos);
}

FUSOR_TEST_CASE("trainer: a step allocates nothing (host) or nothing new from the driver (GPU pool) once the first has run") {
  ready_trainer r;
  [[maybe_unused]] auto& [ex, net, trainer, loader] = r;
  const auto* first = loader.next();
  trainer.step(first->images, first->labels, ex);  // cuBLASLt plans, workspaces: once
  finish(ex);
#if defined(FUSOR_TEST_CUDA)
  // On the GPU, kernels take scratch (cuBLASLt's workspace, partial sums) from
  // the stream-ordered pool, which keeps what is freed: a step must not make
  // the pool ask the driver for more memory.
  const auto reserved = [] {
    std::uint64_t bytes = 0;
    FUSOR_CUDA_CHECK(cudaMemPoolGetAttribute(detail::device_pool(), cudaMemPoolAttrReservedMemCurrent, &bytes));
    return bytes;
  };
  const std::uint64_t before = reserved();
#else
  const std::uint64_t before = allocation_count();  // on the host: no allocation at all
#endif
  for (int i = 0; i < 4; ++i) {
    const auto* b = loader.next();
    trainer.step(b->images, b->labels, ex);
  }
  finish(ex);
#if defined(FUSOR_TEST_CUDA)
  CHECK(reserved() == before);
#else
  CHECK(allocation_count() == before);
#endif
}

FUSOR_TEST_CASE("trainer: a short run on 2048 Fashion-MNIST images gets its loss below 0.75") {
  // Bound: chance is ln 10 = 2.30; four epochs of this MLP reach about 0.6 on
  // the training slice (a regression in any part shows as a loss near 2.3).
  const std::vector<double> losses = train_epochs(0, 4, {}, {});
  INFO("epoch losses " << losses[0] << " " << losses[1] << " " << losses[2] << " " << losses[3]);
  CHECK(losses[0] < 2.3);
  CHECK(losses[3] < 0.75);
}

template <class Precision>
std::vector<double> train_reduced_precision(bool dynamic_scaling, std::int64_t& steps_applied, float& final_scale) {
  executor ex{};
  using net_t = nn::network<mlp, Precision, space>;
  net_t net(128, {.seed = 3});
  optim::trainer_options o = schedule(16 * 3);
  o.scaling.dynamic = dynamic_scaling;
  optim::trainer<net_t, optim::adamw> trainer(net, o, optim::adamw_options{.weight_decay = 0.01f});
  trainer.initialize(ex);
  data::loader<space> loader(slice(), {.batch_size = 128, .seed = 5, .drop_last = true, .mean = 0.286f, .std = 0.353f});
  std::vector<double> losses;
  for (int e = 0; e < 3; ++e) {
    trainer.loss().reset(ex);
    loader.start_epoch(std::uint64_t(e));
    while (const auto* b = loader.next()) trainer.step(b->images, b->labels, ex);
    losses.push_back(trainer.loss().totals().mean_loss);
  }
  steps_applied = trainer.controller().step_for_host();
  final_scale = trainer.controller().loss_scale_for_host();
  return losses;
}

FUSOR_TEST_CASE("trainer: bf16 with fp32 master weights, and fp16 with a dynamic loss scale, learn like fp32") {
  std::int64_t steps = 0;
  float scale = 0;
  const std::vector<double> bf16_losses = train_reduced_precision<bf16>(false, steps, scale);
  INFO("bf16 epoch losses " << bf16_losses[0] << " " << bf16_losses[1] << " " << bf16_losses[2]);
  CHECK(steps == 48);
  CHECK(scale == 1.0f);
  CHECK(bf16_losses[2] < 0.85);
  const std::vector<double> fp16_losses = train_reduced_precision<fp16>(true, steps, scale);
  INFO("fp16 epoch losses " << fp16_losses[0] << " " << fp16_losses[1] << " " << fp16_losses[2] << ", steps applied "
                            << steps << ", final scale " << scale);
  CHECK(fp16_losses[2] < 0.85);
  CHECK(steps >= 40);  // a few steps may be skipped while the scale backs off from 2^16
  CHECK(steps <= 48);
  // Each skipped step halved the scale once; no growth within 48 clean steps (interval 2000).
  CHECK(scale == std::ldexp(65536.0f, -int(48 - steps)));
}

FUSOR_TEST_CASE("trainer: bf16 parameters refuse a step before initialize(), which would zero them; a loaded state "
                "counts as initialized") {
  executor ex{};
  using net_t = nn::network<mlp, bf16, space>;
  data::loader<space> loader(slice(), {.batch_size = 128, .seed = 5, .drop_last = true, .mean = 0.286f, .std = 0.353f});
  loader.start_epoch(0);
  const auto* batch = loader.next();
  REQUIRE(batch != nullptr);
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_uninitialized_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  {
    net_t net(128, {.seed = 3});
    optim::trainer<net_t, optim::adamw> trainer(net, schedule(10), optim::adamw_options{});
    const auto before = to_host(net.group<bfloat16>().values());
    expect_error<fusor::error>([&] { trainer.step(batch->images, batch->labels, ex); },
                               {"fusor::optim::trainer", "step() before initialize(ex)", "about zero"});
    const auto after = to_host(net.group<bfloat16>().values());  // refused before anything changed
    CHECK(std::memcmp(after.data(), before.data(), std::size_t(before.size()) * sizeof(bfloat16)) == 0);
    trainer.initialize(ex);
    trainer.step(batch->images, batch->labels, ex);
    optim::save_training_state(dir / "bf16.safetensors", trainer);
  }
  net_t net(128, {.seed = 4});
  optim::trainer<net_t, optim::adamw> resumed(net, schedule(10), optim::adamw_options{});
  optim::load_training_state(dir / "bf16.safetensors", resumed);  // master weights from the file
  resumed.step(batch->images, batch->labels, ex);
  std::filesystem::remove_all(dir);
}

FUSOR_TEST_CASE("trainer: pruning zeroes the smallest half of the weights, which stay zero; biases are kept") {
  // Global magnitude pruning over every weight matrix of the group (not per layer).
  executor ex{};
  network_t net(64, {.seed = 9});
  optim::trainer<network_t, optim::sgd> trainer(net, schedule(10), optim::sgd_options{.momentum = 0.9f});
  trainer.initialize(ex);
  data::loader<space> loader(slice(), {.batch_size = 64, .seed = 1, .drop_last = true});
  loader.start_epoch(0);
  const auto* first = loader.next();
  trainer.step(first->images, first->labels, ex);
  const auto before = to_host(net.group<float>().values());
  trainer.prune(0.5, ex);
  const auto pruned = to_host(net.group<float>().values());
  for (int i = 0; i < 5; ++i) {
    const auto* b = loader.next();
    trainer.step(b->images, b->labels, ex);
  }
  const auto after = to_host(net.group<float>().values());
  index_t weights = 0, zeros = 0, kept_moved = 0, kept = 0;
  double largest_pruned = 0, smallest_kept = 1e30;
  for (const nn::parameter_slot& slot : net.group<float>().slots())
    for (index_t i = slot.offset; i < slot.offset + slot.size; ++i) {
      const bool is_weight = slot.shape.size() == 2, zero = pruned.data()[i] == 0.0f;
      if (!is_weight) {
        CHECK(!zero);
        continue;
      }
      ++weights;
      if (zero) {
        ++zeros;
        CHECK(after.data()[i] == 0.0f);  // stays pruned
        largest_pruned = std::fmax(largest_pruned, std::fabs(before.data()[i]));
      } else {
        ++kept;
        kept_moved += after.data()[i] != pruned.data()[i];
        smallest_kept = std::fmin(smallest_kept, std::fabs(before.data()[i]));
      }
    }
  CHECK(std::fabs(double(zeros) / double(weights) - 0.5) < 0.001);
  CHECK(largest_pruned <= smallest_kept);  // the smallest magnitudes went
  CHECK(kept_moved > kept / 2);            // and training went on for the rest
}

namespace {
// `steps` steps of `trainer` on the loader's next batches.
template <class Trainer>
void take_steps(Trainer& trainer, data::loader<space>& loader, int steps, const executor& ex) {
  for (int i = 0; i < steps; ++i) {
    const auto* b = loader.next();
    REQUIRE(b != nullptr);
    trainer.step(b->images, b->labels, ex);
  }
}
}  // namespace

FUSOR_TEST_CASE("trainer: pruning masks are part of the training state: resumed, training goes on pruning") {
  const auto dir = std::filesystem::temp_directory_path() / ("fusor_pruned_state_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  executor ex{};
  const data::loader_options lo{.batch_size = 64, .seed = 1, .drop_last = true};
  // Uninterrupted: 2 steps, prune half, 2 steps, save, 3 steps.
  network_t net(64, {.seed = 9});
  trainer_t trainer(net, schedule(10), optim::adamw_options{.weight_decay = 0.01f});
  trainer.initialize(ex);
  data::loader<space> loader(slice(), lo);
  loader.start_epoch(0);
  take_steps(trainer, loader, 2, ex);
  trainer.prune(0.5, ex);
  take_steps(trainer, loader, 2, ex);
  optim::save_training_state(dir / "pruned.safetensors", trainer);
  take_steps(trainer, loader, 3, ex);
  const auto want = to_host(net.group<float>().values());

  const io::checkpoint_reader saved(dir / "pruned.safetensors");
  const io::tensor_record* mask = saved.contents().find("pruning.0.mask");
  REQUIRE(mask != nullptr);
  CHECK(mask->type == io::dtype::u8);
  CHECK(mask->element_count() == net.group<float>().size());
  index_t pruned = 0;
  for (index_t i = 0; i < mask->element_count(); ++i) pruned += mask->value(i) == 0;
  CHECK(pruned == (784 * 64 + 64 * 10) / 2);  // half the weights, no bias

  // Resumed into a trainer that never pruned: it prunes as the saving one did, bit for bit.
  network_t other(64, {.seed = 10});
  trainer_t resumed(other, schedule(10), optim::adamw_options{.weight_decay = 0.01f});
  resumed.initialize(ex);
  CHECK(!resumed.pruned());
  optim::load_training_state(dir / "pruned.safetensors", resumed);
  CHECK(resumed.pruned());
  data::loader<space> resumed_loader(slice(), lo);
  resumed_loader.start_epoch(0);
  for (int i = 0; i < 4; ++i) resumed_loader.next();  // the batches the first run took before its save
  take_steps(resumed, resumed_loader, 3, ex);
  const auto got = to_host(other.group<float>().values());
  REQUIRE(got.size() == want.size());
  index_t differ = 0, zeros = 0;
  for (index_t i = 0; i < got.size(); ++i) {
    differ += std::memcmp(&got.data()[i], &want.data()[i], sizeof(float)) != 0;
    zeros += mask->value(i) == 0 && got.data()[i] == 0.0f;
  }
  CHECK(differ == 0);
  CHECK(zeros == pruned);  // weight decay and the gradients moved none of the pruned weights

  // A pruned trainer loading a state saved unpruned stops pruning: it steps as the unpruned trainer does.
  network_t plain_net(64, {.seed = 9});
  trainer_t plain(plain_net, schedule(10), optim::adamw_options{.weight_decay = 0.01f});
  plain.initialize(ex);
  optim::save_training_state(dir / "unpruned.safetensors", plain);
  CHECK(io::checkpoint_reader(dir / "unpruned.safetensors").contents().find("pruning.0.mask") == nullptr);
  optim::load_training_state(dir / "unpruned.safetensors", resumed);
  CHECK(!resumed.pruned());
  data::loader<space> a(slice(), lo), b(slice(), lo);
  a.start_epoch(0);
  b.start_epoch(0);
  take_steps(plain, a, 2, ex);
  take_steps(resumed, b, 2, ex);
  const auto plain_values = to_host(plain_net.group<float>().values());
  const auto resumed_values = to_host(other.group<float>().values());
  CHECK(std::memcmp(plain_values.data(), resumed_values.data(), sizeof(float) * std::size_t(plain_values.size())) ==
        0);

  // load_parameters passes over the masks, as over the optimizer state.
  network_t inference(64, {.seed = 11});
  optim::load_parameters(dir / "pruned.safetensors", inference);

  // A mask holding other than 0 and 1 is refused, naming it, and the trainer stays as it was.
  write_edited(saved.contents(), dir / "damaged.safetensors", [](io::tensor_record& t) {
    if (t.name == "pruning.0.mask") set_element(t, 3, 2);
    return true;
  });
  optim::save_training_state(dir / "before.safetensors", resumed);
  expect_error<io::checkpoint_error>([&] { optim::load_training_state(dir / "damaged.safetensors", resumed); },
                                     {"'pruning.0.mask' element 3 is 2", "0 or 1", "nothing was loaded"});
  CHECK(!resumed.pruned());
  optim::save_training_state(dir / "after.safetensors", resumed);
  CHECK(file_bytes(dir / "after.safetensors") == file_bytes(dir / "before.safetensors"));
  std::filesystem::remove_all(dir);
}

#if defined(FUSOR_TEST_CUDA)
FUSOR_TEST_CASE("trainer: a step captured as a CUDA graph and replayed equals the eager steps") {
  const created_stream created;
  const cudaStream_t stream = created.stream;
  const cuda_executor ex{stream};
  const data::loader_options lo{.batch_size = 128, .seed = 7, .drop_last = true};
  auto run = [&](bool graph) {
    network_t net(128, {.seed = 6, .stream = stream});
    trainer_t trainer(net, {.schedule = optim::learning_rate_schedule::warmup_cosine(2e-3f, 2, 10), .stream = stream},
                      optim::adamw_options{});
    trainer.initialize(ex);
    data::loader<space> loader(slice(), lo, stream);
    loader.start_epoch(0);
    space_tensor<float, dextents<index_t, 2>> images(128, 784);
    space_tensor<std::int32_t, dextents<index_t, 1>> labels(128);
    graph::captured_step captured;
    for (int i = 0; i < 8; ++i) {
      const auto* b = loader.next();
      copy_async(images.view(), b->images, stream);
      copy_async(labels.view(), b->labels, stream);
      if (!graph || i == 0) {
        trainer.step(images, labels, ex);
      } else {
        if (!captured.captured()) captured.capture(stream, [&] { trainer.step(images, labels, ex); });
        captured.replay();
      }
    }
    ex.synchronize();
    if (graph) CHECK(captured.node_count() > 10);
    // The host's count of steps follows the replays (a graph::host_effect), as
    // does the device's (the learning rate schedule and AdamW's bias correction).
    CHECK(trainer.steps_taken() == 8);
    CHECK(trainer.controller().step_for_host() == 8);
    return std::pair{to_host(net.group<float>().values()), trainer.loss().totals().mean_loss};
  };
  const auto [eager, eager_loss] = run(false);
  const auto [replayed, replayed_loss] = run(true);
  CHECK(replayed_loss == eager_loss);
  for (index_t i = 0; i < eager.size(); ++i) REQUIRE(replayed.data()[i] == eager.data()[i]);
}
#endif
