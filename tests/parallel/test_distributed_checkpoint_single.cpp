// parallel::save_distributed / load_distributed on one process (comm::single)
// and the placement of tensor-parallel slices in the whole tensor: the slices
// of column_parallel<2, 3> (a GPT's qkv) and row_parallel<2>, initialised as
// the network initialises them, hold exactly the whole tensor's elements that
// their placement names; a bf16 network with fp32 master weights saved after
// 2 steps resumes bit for bit; the errors (reserved metadata, a communicator
// that is not the mesh's world, a dropout network of another seed, damaged
// values refused before anything is loaded, a pruned trainer, whose masks a
// distributed save does not hold).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <fusor/comm/single.hpp>
#include <fusor/nn/dropout.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/sgd.hpp>
#include <fusor/optim/training_checkpoint.hpp>
#include <fusor/parallel/distributed_checkpoint.hpp>

#include "io/io_support.hpp"
#include "parallel/tensor_parallel_checks.hpp"
#include "support/checkpoint_edits.hpp"

using namespace tensor_parallel_test;

namespace {
// The whole tensor's elements, as the unsplit layer draws them, against each
// slice's, as the split layer draws them, through the slice's placement.
void expect_slices_tile(const std::vector<index_t>& slice_shape, const nn::sharding& shard) {
  const nn::parameter_spec sliced{"w", slice_shape, nn::initializer::uniform_fan_in(5), shard};
  std::vector<index_t> whole_shape = nn::place_parameter(slice_shape, shard, 0).whole_shape;
  const nn::parameter_spec whole{"w", whole_shape, nn::initializer::uniform_fan_in(5)};
  std::vector<float> want(std::size_t(whole.size()));
  nn::initialize_parameter(want.data(), whole.size(), whole.init, 7);
  std::vector<int> covered(want.size(), 0);
  for (int r = 0; r < shard.ways; ++r) {
    std::vector<float> mine(std::size_t(sliced.size()));
    nn::initialize_parameter(mine.data(), sliced, 7, r);
    const nn::parameter_placement place = nn::place_parameter(slice_shape, shard, r);
    CHECK(place.split);
    CHECK(place.whole_shape == whole_shape);
    index_t elements = 0;
    for (const nn::parameter_segment& s : place.segments) {
      elements += s.elements();
      for (index_t k = 0; k < s.elements(); ++k) {
        // k-th element of the box, row-major, as an index into the whole tensor.
        index_t at = k, offset = 0;
        std::vector<index_t> local(s.shape.size());
        for (std::size_t a = s.shape.size(); a-- > 0;) local[a] = at % s.shape[a], at /= s.shape[a];
        for (std::size_t a = 0; a < s.shape.size(); ++a) offset = offset * whole_shape[a] + s.begin[a] + local[a];
        CHECK(mine[std::size_t(s.offset + k)] == want[std::size_t(offset)]);
        ++covered[std::size_t(offset)];
      }
    }
    CHECK(elements == sliced.size());
  }
  for (int c : covered) REQUIRE(c == 1);  // every element in exactly one slice
}

using bf16_net = nn::network<mlp<unsplit, unsplit>, bf16, host_space>;
const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(1e-2f),
                                            .clip = {.max_norm = 0.05f}};

std::vector<double> steps(fusor::optim::trainer<bf16_net, fusor::optim::adamw>& train, int first, int last) {
  std::vector<double> losses;
  for (int s = first; s < last; ++s) {
    const auto x = random_tensor<fp32, input_extents, host_space>(input_extents(batch), 100 + s);
    const auto labels = random_labels<host_space>(batch, 32, 200 + std::uint32_t(s));
    train.loss().reset(host_executor{});
    train.step(x, labels, host_executor{});
    losses.push_back(train.loss().totals().mean_loss);
  }
  return losses;
}

// A bf16 network of seed 5 and its trainer, initialized.
struct bf16_trainer {
  bf16_net net{batch, {.seed = 5}};
  fusor::optim::trainer<bf16_net, fusor::optim::adamw> train{net, options, fusor::optim::adamw_options{}};
  bf16_trainer() { train.initialize(host_executor{}); }
};
}  // namespace

TEST_CASE("placement: the slices of column_parallel<2, 3> and row_parallel<2> tile the whole tensor") {
  // column_parallel<2, 3> of a [24, 5] weight: each rank [3 parts, 4 rows, 5], whole [24, 5].
  expect_slices_tile({3, 4, 5}, {1, 2, 3});
  const nn::parameter_placement qkv = nn::place_parameter({3, 4, 5}, {1, 2, 3}, 1);
  REQUIRE(qkv.segments.size() == 3);
  CHECK(qkv.segments[2].begin == std::vector<index_t>{20, 0});  // part 2, slice 1: rows (2 * 2 + 1) * 4 on
  CHECK(qkv.segments[2].offset == 40);
  expect_slices_tile({3, 4}, {1, 2, 3});  // its bias: [3, 4] slices of a [24] vector
  expect_slices_tile({10, 3}, {1, 2});    // row_parallel<2> of a [10, 6] weight
  expect_slices_tile({6, 7}, {0, 3});     // column_parallel<3> of an [18, 7] weight
  const nn::parameter_placement whole = nn::place_parameter({10}, {}, 0);
  CHECK(!whole.split);
  CHECK(whole.whole_shape == std::vector<index_t>{10});
}

TEST_CASE("distributed checkpoint on one process: bf16 parameters and fp32 master weights resume bit for bit") {
  const io_test::scratch_directory scratch("dcp_single");
  const auto dir = scratch / "step-2";
  fusor::comm::single world;
  bf16_trainer train_state;
  auto& train = train_state.train;
  steps(train, 0, 2);
  parallel::save_distributed(dir, train, world, parallel::single_process, "step-2", {{"epoch", "1"}}, host_executor{});
  const std::vector<double> want = steps(train, 2, 5);
  CHECK(std::filesystem::exists(dir / "manifest.safetensors"));
  CHECK(std::filesystem::exists(dir / "shard-00000-of-00001.safetensors"));

  bf16_trainer resumed_state;
  auto& resumed = resumed_state.train;
  const auto meta = parallel::load_distributed(dir, resumed, parallel::single_process, host_executor{});
  CHECK(meta.at("epoch") == "1");
  CHECK(meta.at("training.mesh") == "1x1x1");
  CHECK(resumed.steps_taken() == 2);
  CHECK(steps(resumed, 2, 5) == want);
}

TEST_CASE("distributed checkpoint errors: reserved metadata, another world, a dropout network of another seed, "
          "a pruned trainer") {
  const io_test::scratch_directory scratch("dcp_errors");
  fusor::comm::single world;
  bf16_trainer train_state;
  auto& train = train_state.train;
  fusor_test::expect_error<fusor::error>(
      [&] {
        parallel::save_distributed(scratch / "a", train, world, parallel::single_process, "a", {{"training.step", "1"}},
                                   host_executor{});
      },
      {"'training.step'", "reserved"});
  const parallel::checkpoint_rank two{{.data = 2}, {.data = 1}};
  fusor_test::expect_error<fusor::error>(
      [&] { parallel::save_distributed(scratch / "a", train, world, two, "a", {}, host_executor{}); },
      {"rank 0 of 1", "places this rank at 1 of 2", "the world communicator the mesh was made from"});

  using dropout_net = nn::network<nn::sequential<nn::features<64>, nn::linear<64, 32>, nn::dropout<10>>, fp32, host_space>;
  dropout_net first(batch, {.seed = 3});
  fusor::optim::trainer<dropout_net, fusor::optim::adamw> a(first, options, fusor::optim::adamw_options{});
  a.initialize(host_executor{});
  parallel::save_distributed(scratch / "d", a, world, parallel::single_process, "d", {}, host_executor{});
  dropout_net second(batch, {.seed = 4});
  fusor::optim::trainer<dropout_net, fusor::optim::adamw> b(second, options, fusor::optim::adamw_options{});
  b.initialize(host_executor{});
  fusor_test::expect_error<fusor::io::checkpoint_error>(
      [&] { parallel::load_distributed(scratch / "d", b, parallel::single_process, host_executor{}); },
      {"network of seed 3", "this one has seed 4", "{.seed = 3}"});
  static_assert(dropout_net::draws_random_numbers && !bf16_net::draws_random_numbers);

  // A distributed save holds no pruning masks: a pruned trainer is refused rather than lose them, and a pruned
  // trainer that loads one stops pruning, as the saving trainer did not prune.
  parallel::save_distributed(scratch / "unpruned", train, world, parallel::single_process, "u", {}, host_executor{});
  train.prune(0.5, host_executor{});
  fusor_test::expect_error<fusor::error>(
      [&] {
        parallel::save_distributed(scratch / "p", train, world, parallel::single_process, "p", {}, host_executor{});
      },
      {"save_distributed", "the trainer prunes", "save_training_state"});
  fusor_test::expect_error<fusor::error>(
      [&] {
        parallel::save_distributed_latest(scratch / "rolling", train, world, parallel::single_process, "p", {},
                                          host_executor{});
      },
      {"save_distributed_latest", "the trainer prunes"});
  CHECK(!std::filesystem::exists(scratch / "p"));
  CHECK(!std::filesystem::exists(scratch / "rolling" / "p"));
  parallel::load_distributed(scratch / "unpruned", train, parallel::single_process, host_executor{});
  CHECK(!train.pruned());
}

TEST_CASE("distributed checkpoint: damaged values are refused before anything is loaded, naming tensor and value") {
  const io_test::scratch_directory scratch("dcp_damaged");
  fusor::comm::single world;
  bf16_trainer train_state;
  auto& train = train_state.train;
  steps(train, 0, 2);
  parallel::save_distributed(scratch / "good", train, world, parallel::single_process, "good", {}, host_executor{});
  const std::string shard = "shard-00000-of-00001.safetensors";
  const fusor::io::safetensors_file good = fusor::io::checkpoint_reader(scratch / "good" / shard).contents();
  std::string second_moment;
  for (const auto& t : good.tensors)
    if (t.name.ends_with(".exp_avg_sq")) second_moment = t.name;
  REQUIRE(!second_moment.empty());

  struct damage {
    std::string tensor;
    index_t element;
    double value;
    std::vector<const char*> named;
  };
  const damage cases[] = {
      {"0.weight", 7, std::nan(""), {"tensor '0.weight' element 7 is nan", "finite"}},
      {"controller.loss_scale", 0, 0, {"tensor 'controller.loss_scale' is 0", "above 0"}},
      {"controller.step", 0, 3, {"'controller.step' is 3", "0 to the steps taken (2, metadata training.steps_taken)"}},
      {second_moment, 2, -1, {"element 2 is -1", "0 or more"}},
  };
  for (const damage& d : cases) {
    INFO(d.tensor);
    // The same save with one value changed (the manifest's hash following it): the shard keeps its size, so only
    // the value check can refuse it.
    const auto dir = scratch / "damaged";
    std::filesystem::remove_all(dir);
    std::filesystem::copy(scratch / "good", dir);
    bool changed = false;
    fusor_test::write_edited(good, dir / shard, [&](fusor::io::tensor_record& t) {
      if (t.name != d.tensor) return true;
      fusor_test::set_element(t, d.element, d.value);
      changed = true;
      return true;
    });
    REQUIRE(changed);
    fusor_test::record_shard_hash(dir, 0, dir / shard);

    bf16_trainer resumed_state;
    auto& resumed = resumed_state.train;
    fusor::optim::save_training_state(scratch / "before.safetensors", resumed);
    std::string message;
    try {
      parallel::load_distributed(dir, resumed, parallel::single_process, host_executor{});
    } catch (const fusor::io::checkpoint_error& e) {
      message = e.what();
    }
    INFO("message: ", message);
    for (const char* part : d.named) CHECK_MESSAGE(message.find(part) != std::string::npos, "expected: ", part);
    CHECK(message.find("load_distributed: '" + dir.string() + "'") != std::string::npos);
    CHECK(message.find("nothing was loaded") != std::string::npos);
    // Nothing was copied: the trainer saves the same bytes as before the attempt.
    fusor::optim::save_training_state(scratch / "after.safetensors", resumed);
    CHECK(fusor::io::read_file(scratch / "after.safetensors") == fusor::io::read_file(scratch / "before.safetensors"));
  }
}

TEST_CASE("distributed checkpoint on one process: another optimizer's state is refused, unless told to ignore it") {
  const io_test::scratch_directory scratch("dcp_unread");
  fusor::comm::single world;
  bf16_trainer adamw_state;
  steps(adamw_state.train, 0, 2);
  parallel::save_distributed(scratch / "adamw", adamw_state.train, world, parallel::single_process, "adamw", {},
                             host_executor{});
  // SGD without momentum keeps only the fp32 master weights: AdamW's moments are read by nothing.
  bf16_net net{batch, {.seed = 5}};
  fusor::optim::trainer<bf16_net, fusor::optim::sgd> sgd(net, options, fusor::optim::sgd_options{});
  sgd.initialize(host_executor{});
  fusor::optim::save_training_state(scratch / "before.safetensors", sgd);
  fusor_test::expect_error<fusor::io::checkpoint_error>(
      [&] { parallel::load_distributed(scratch / "adamw", sgd, parallel::single_process, host_executor{}); },
      {"that this trainer does not read", ".exp_avg'", ".exp_avg_sq'", "nothing was loaded"});
  fusor_test::expect_error<fusor::io::checkpoint_error>(
      [&] { parallel::load_distributed(scratch / "adamw", sgd, world, parallel::single_process, host_executor{}); },
      {"that no rank of this trainer reads", ".exp_avg'", "unread_tensors::ignore"});
  fusor::optim::save_training_state(scratch / "after.safetensors", sgd);
  CHECK(fusor::io::read_file(scratch / "after.safetensors") == fusor::io::read_file(scratch / "before.safetensors"));

  // Told to ignore them, both load the parameters, master weights and steps.
  parallel::load_distributed(scratch / "adamw", sgd, parallel::single_process, host_executor{},
                             fusor::optim::unread_tensors::ignore);
  CHECK(sgd.steps_taken() == 2);
  const std::vector<double> loaded = host_values(net.group<fusor::bfloat16>().values());
  CHECK(loaded == host_values(adamw_state.net.group<fusor::bfloat16>().values()));
  bf16_net other{batch, {.seed = 5}};
  fusor::optim::trainer<bf16_net, fusor::optim::sgd> sgd2(other, options, fusor::optim::sgd_options{});
  sgd2.initialize(host_executor{});
  parallel::load_distributed(scratch / "adamw", sgd2, world, parallel::single_process, host_executor{},
                             fusor::optim::unread_tensors::ignore);
  CHECK(host_values(other.group<fusor::bfloat16>().values()) == loaded);
}

TEST_CASE("save_distributed_latest: removes only its own older saves and unfinished ones; refuses ids that are not folders") {
  const io_test::scratch_directory scratch("dcp_latest");
  const std::filesystem::path root = scratch / "run";
  fusor::comm::single world;
  bf16_trainer state;
  auto& train = state.train;
  // A best model saved beside the series, and an unfinished save (a shard, no manifest) left by a crash.
  parallel::save_distributed(root / "best", train, world, parallel::single_process, "best", {}, host_executor{});
  std::filesystem::create_directories(root / "crashed");
  fusor::io::write_file_atomically(root / "crashed" / "shard-00000-of-00001.safetensors", {});
  std::filesystem::create_directories(root / "notes");
  for (const std::string id : {"", ".", "..", "a/b", "latest", "two words"}) {
    INFO("id '", id, "'");
    fusor_test::expect_error<fusor::io::checkpoint_error>(
        [&] {
          parallel::save_distributed_latest(root, train, world, parallel::single_process, id, {}, host_executor{});
        },
        {"must be a folder name"});
  }
  CHECK(!std::filesystem::exists(scratch / "manifest.safetensors"));  // nothing written beside the root either
  CHECK(!std::filesystem::exists(root / "manifest.safetensors"));
  CHECK(!parallel::latest_distributed_save(root));

  steps(train, 0, 1);
  parallel::save_distributed_latest(root, train, world, parallel::single_process, "step-1", {}, host_executor{});
  CHECK(!std::filesystem::exists(root / "crashed"));
  steps(train, 1, 2);
  parallel::save_distributed_latest(root, train, world, parallel::single_process, "step-2", {{"epoch", "1"}},
                                    host_executor{});
  CHECK(!std::filesystem::exists(root / "step-1"));
  CHECK(std::filesystem::exists(root / "best" / "manifest.safetensors"));
  CHECK(std::filesystem::exists(root / "notes"));
  REQUIRE(parallel::latest_distributed_save(root) == root / "step-2");

  // `latest` written by hand with a newline (echo step-2 > latest) still names the save.
  const std::string by_hand = "step-2\n";
  fusor::io::write_file_atomically(root / "latest", std::as_bytes(std::span(by_hand.data(), by_hand.size())));
  CHECK(parallel::latest_distributed_save(root) == root / "step-2");
  bf16_trainer resumed;
  CHECK(parallel::load_distributed(root / "step-2", resumed.train, world, parallel::single_process, host_executor{})
            .at("epoch") == "1");
  CHECK(resumed.train.steps_taken() == 2);
}
