// A network of composites under every executor: optim::trainer gets its loss
// down on a small synthetic classification task (sequences of 4 positions x 8
// channels), with and without recomputation bit for bit alike; checkpoints
// keep the nested names ("1.1.w2.weight") and load into the recomputed
// network; training resumed from a training-state checkpoint repeats the
// uninterrupted losses.
#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fusor/io/checkpoint.hpp>
#include <fusor/nn/branches.hpp>
#include <fusor/nn/chain.hpp>
#include <fusor/nn/flatten.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/recompute.hpp>
#include <fusor/nn/residual.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/optim/training_checkpoint.hpp>

#include "nn/swiglu_layer.hpp"
#include "nn/test_composition_support.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_composition_training {

using namespace composition_test;

namespace {
constexpr index_t batch = 32, classes = 4, batches_per_epoch = 4;
using sample = nn::features<4, 8>;
using block = nn::residual<nn::layernorm<8>, example::swiglu<8, 16>>;
template <class Block>
using classifier = nn::sequential<sample, Block,
                                  nn::branches<nn::join_concat, nn::layernorm<8>, nn::residual<nn::layernorm<8>, nn::tanh_activation>>,
                                  nn::flatten, nn::linear<64, 16, nn::relu>, nn::residual<nn::linear<16, 16, nn::tanh_activation>>,
                                  nn::linear<16, classes>>;
template <class Block>
using network_t = nn::network<classifier<Block>, fp32, space>;
template <class Block>
using trainer_t = optim::trainer<network_t<Block>, optim::adamw>;

using images_t = tensor<fp32, extents<index_t, dynamic, 4, 8>, row_major, space>;
using labels_t = tensor<std::int32_t, dextents<index_t, 1>, row_major, space>;

// Class c: a pattern of its own (fixed random) plus noise, so the classes are separable.
struct synthetic_data {
  std::vector<images_t> images;
  std::vector<labels_t> labels;
  synthetic_data() {
    std::mt19937 rng(77);
    std::normal_distribution<float> noise(0.0f, 0.6f);
    std::vector<float> patterns(std::size_t(classes * sample::size));
    for (float& p : patterns) p = noise(rng) * 1.5f;
    for (index_t b = 0; b < batches_per_epoch; ++b) {
      host_tensor<fp32, extents<index_t, dynamic, 4, 8>> x(batch);
      host_tensor<std::int32_t, dextents<index_t, 1>> y(batch);
      for (index_t i = 0; i < batch; ++i) {
        const std::int32_t c = std::int32_t(rng() % std::uint32_t(classes));
        y.data()[i] = c;
        for (index_t j = 0; j < sample::size; ++j)
          x.data()[i * sample::size + j] = patterns[std::size_t(c * sample::size + j)] + noise(rng);
      }
      images.push_back(to_space(x));
      labels.push_back(to_space(y));
    }
  }
};
const synthetic_data& data() {
  static const synthetic_data d;
  return d;
}

// The mean loss of each epoch, from epoch `first`; resumed from / saved to a training state when given.
template <class Block>
std::vector<double> train(int first, int epochs, const std::filesystem::path& resume_from = {},
                          const std::filesystem::path& save_to = {}) {
  executor ex{};
  network_t<Block> net(batch, {.seed = 8});
  trainer_t<Block> trainer(net, {.schedule = optim::learning_rate_schedule::constant(3e-3f)}, optim::adamw_options{});
  trainer.initialize(ex);
  if (!resume_from.empty()) optim::load_training_state(resume_from, trainer);
  std::vector<double> losses;
  for (int e = first; e < first + epochs; ++e) {
    trainer.loss().reset(ex);
    for (index_t b = 0; b < batches_per_epoch; ++b) trainer.step(data().images[std::size_t(b)], data().labels[std::size_t(b)], ex);
    losses.push_back(trainer.loss().totals().mean_loss);
  }
  if (!save_to.empty()) optim::save_training_state(save_to, trainer);
  return losses;
}

std::filesystem::path scratch_directory(const char* what) {
  const auto dir = std::filesystem::temp_directory_path() / (std::string("fusor_composition_") + what + "_" FUSOR_TEST_EXECUTOR_NAME);
  std::filesystem::create_directories(dir);
  return dir;
}
}  // namespace

FUSOR_TEST_CASE("composites train: the loss falls on a synthetic task, recomputed or not, bit for bit alike") {
  const std::vector<double> kept = train<block>(0, 12);
  const std::vector<double> recomputed = train<nn::recomputed<block>>(0, 12);
  INFO("epoch losses: first " << kept.front() << ", last " << kept.back());
  CHECK(kept.front() > 0.8);         // about ln 4 = 1.39 at the start
  CHECK(kept.back() < 0.25 * kept.front());
  CHECK(recomputed == kept);
}

FUSOR_TEST_CASE("composites: a checkpoint keeps the nested names and loads into the recomputed network") {
  const auto dir = scratch_directory("checkpoint");
  executor ex{};
  network_t<block> net(batch, {.seed = 9});
  optim::save_parameters(dir / "parameters.safetensors", net);
  const io::checkpoint_reader reader(dir / "parameters.safetensors");
  std::vector<std::string> stored;
  for (const io::tensor_record& t : reader.contents().tensors) stored.push_back(t.name);
  for (const std::string name : {"0.0.weight", "0.0.bias", "0.1.w1.weight", "0.1.w2.weight", "0.1.w3.weight", "1.0.0.weight",
                           "1.1.0.0.bias", "3.weight", "4.0.weight", "5.bias"}) {
    INFO(name);
    CHECK(std::find(stored.begin(), stored.end(), name) != stored.end());
  }
  REQUIRE(reader.contents().find("0.1.w2.weight") != nullptr);
  CHECK(reader.contents().find("0.1.w2.weight")->shape == std::vector<index_t>{8, 16});

  network_t<nn::recomputed<block>> loaded(batch, {.seed = 10});  // other initial values
  optim::load_parameters(dir / "parameters.safetensors", loaded);
  const auto a = parameters_of(net), b = parameters_of(loaded);
  for (const auto& [name, record] : a) CHECK(b.at(name).data == record.data);
  CHECK(as_doubles(net.forward(data().images[0], ex, nn::evaluation)) ==
        as_doubles(loaded.forward(data().images[0], ex, nn::evaluation)));
  std::filesystem::remove_all(dir);
}

FUSOR_TEST_CASE("composites: training resumed from a training-state checkpoint repeats the uninterrupted losses") {
  const auto dir = scratch_directory("resume");
  const std::vector<double> straight = train<block>(0, 4);
  const std::vector<double> first_half = train<block>(0, 2, {}, dir / "half.safetensors");
  const std::vector<double> second_half = train<block>(2, 2, dir / "half.safetensors");
  REQUIRE(straight.size() == 4);
  CHECK(first_half[1] == straight[1]);
  CHECK(second_half[0] == straight[2]);
  CHECK(second_half[1] == straight[3]);
  std::filesystem::remove_all(dir);
}

}  // namespace test_composition_training
