// Inf/NaN gradients in training (issue 15): under nonfinite_gradients::stop (optim::trainer's
// default without a dynamic loss scale) the step that has them ends training
// with an error naming it and the first layer backward found them in, and the
// parameters stay those after the step before; under skip that step changes
// nothing and training goes on. The fault is injected as a NaN pixel.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/trainer.hpp>

#include "support/fusor_test.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_nonfinite_training {

using namespace fusor_test;
namespace nn = fusor::nn;
namespace optim = fusor::optim;

namespace {

using mlp = nn::sequential<nn::features<6>, nn::linear<6, 8, nn::relu>, nn::linear<8, 8, nn::tanh_activation>,
                           nn::linear<8, 3>>;
using network_t = nn::network<mlp, fp32, space>;
using trainer_t = optim::trainer<network_t, optim::adamw>;
using images_t = host_tensor<float, extents<index_t, dynamic, 6>>;
using labels_t = host_tensor<std::int32_t, dextents<index_t, 1>>;
constexpr index_t batch = 4;

struct batch_data {
  images_t images{batch};
  labels_t labels{dextents<index_t, 1>(batch)};
};
batch_data random_batch(std::uint32_t seed) {
  batch_data b;
  fill_random(b.images, seed);
  std::mt19937 rng(seed);
  for (index_t i = 0; i < batch; ++i) b.labels.data()[i] = std::int32_t(rng() % 3);
  return b;
}

std::vector<float> parameters_of(const network_t& net) {
  std::vector<float> all;
  net.for_each_parameter([&](const nn::parameter_slot&, const auto& values, const auto&) {
    const auto h = to_host(values);
    all.insert(all.end(), h.data(), h.data() + h.size());
  });
  return all;
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const optim::nonfinite_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

FUSOR_TEST_CASE("Inf/NaN gradients: stop names the step and the first layer in backward's order, parameters kept") {
  executor ex{};
  network_t net(batch, {.seed = 3});
  trainer_t train(net, {.schedule = optim::learning_rate_schedule::constant(1e-2f)}, optim::adamw_options{});
  train.initialize(ex);
  for (std::uint32_t s = 0; s < 2; ++s) {
    const batch_data b = random_batch(10 + s);
    train.step(to_space(b.images), to_space(b.labels), ex);
  }
  finish(ex);
  const std::vector<float> before = parameters_of(net);

  batch_data bad = random_batch(20);
  bad.images.data()[5] = std::numeric_limits<float>::quiet_NaN();
  const auto bad_images = to_space(bad.images);
  const auto bad_labels = to_space(bad.labels);
  std::string message = error_of([&] {
    train.step(bad_images, bad_labels, ex);
    // On a GPU the host sees the note once the GPU has finished that step.
    for (int i = 0; i < 100; ++i) {
      finish(ex);
      train.check_not_stopped();
    }
  });
  REQUIRE_MESSAGE(!message.empty(), "a step with a NaN pixel did not stop training");
  INFO(message);
  CHECK(message.find("step 3 had Inf or NaN gradients") != std::string::npos);
  // A NaN input makes every gradient NaN; backward meets layer 2 first.
  CHECK(message.find("first in layer 2 (2.weight, 2.bias)") != std::string::npos);
  CHECK(message.find("the parameters are those after step 2") != std::string::npos);
  CHECK(message.find("nonfinite_gradients::skip") != std::string::npos);
  try {
    train.check_not_stopped();
  } catch (const optim::nonfinite_error& e) {
    CHECK(e.step == 3);
  }
  finish(ex);
  CHECK(parameters_of(net) == before);  // bit for bit

  // Later steps change nothing and say so again; so does evaluation.
  const batch_data good = random_batch(30);
  const auto good_images = to_space(good.images);
  const auto good_labels = to_space(good.labels);
  CHECK(error_of([&] { train.step(good_images, good_labels, ex); }).find("step 3 had") != std::string::npos);
  CHECK(error_of([&] { train.evaluate(good_images, good_labels, ex); }).find("step 3 had") != std::string::npos);
  finish(ex);
  CHECK(parameters_of(net) == before);
  CHECK(train.controller().step_for_host() == 2);
}

FUSOR_TEST_CASE("Inf/NaN gradients: skip leaves that step out and training goes on") {
  executor ex{};
  network_t net(batch, {.seed = 3});
  trainer_t train(net,
                  {.schedule = optim::learning_rate_schedule::constant(1e-2f),
                   .on_nonfinite = optim::nonfinite_gradients::skip},
                  optim::adamw_options{});
  train.initialize(ex);
  const batch_data first = random_batch(10);
  train.step(to_space(first.images), to_space(first.labels), ex);
  finish(ex);
  const std::vector<float> before = parameters_of(net);
  batch_data bad = random_batch(20);
  bad.images.data()[0] = std::numeric_limits<float>::infinity();
  bad.images.data()[1] = -std::numeric_limits<float>::infinity();
  train.step(to_space(bad.images), to_space(bad.labels), ex);
  finish(ex);
  CHECK(train.controller().scalars().read_skip());
  CHECK(parameters_of(net) == before);
  const batch_data good = random_batch(30);
  train.step(to_space(good.images), to_space(good.labels), ex);
  finish(ex);
  CHECK(!train.controller().scalars().read_skip());
  CHECK(parameters_of(net) != before);
  CHECK(train.controller().step_for_host() == 2);
  CHECK(train.controller().scalars().read_stopped_at_step() == 0);
}

FUSOR_TEST_CASE("Inf/NaN gradients: automatic stops in fp32 and skips under a dynamic loss scale") {
  CHECK(optim::stops_on_nonfinite({}));
  CHECK(optim::stops_on_nonfinite({.on_nonfinite = optim::nonfinite_gradients::stop}));
  CHECK(!optim::stops_on_nonfinite({.scaling = {.dynamic = true}}));
  CHECK(optim::stops_on_nonfinite({.scaling = {.dynamic = true}, .on_nonfinite = optim::nonfinite_gradients::stop}));
  CHECK(!optim::stops_on_nonfinite({.on_nonfinite = optim::nonfinite_gradients::skip}));
}

FUSOR_TEST_CASE("Inf/NaN gradients: where none is left to name, one process does not blame other ranks") {
  // The GPU's note can arrive after a later step replaced the stopped step's gradients.
  const std::string one = optim::detail::nonfinite_text("fusor::optim::trainer", 4, -1, "", true);
  const std::string many = optim::detail::nonfinite_text("fusor::parallel::pipeline", 4, -1, "", false);
  INFO(one, "\n", many);
  CHECK(one.find("a later step's gradients have replaced that step's") != std::string::npos);
  CHECK(one.find("rank") == std::string::npos);
  CHECK(many.find("another rank's or stage's") != std::string::npos);
  CHECK(one.find("the parameters are those after step 3") != std::string::npos);
}

}  // namespace test_nonfinite_training
