// examples/gpt_decoder.hpp: generation with a key/value cache computes what the
// network computes. Feeding a sequence token by token gives, at every
// position, the logits nn::network's forward gives there (random parameters
// and tokens, fp32, within 1e-4 of the largest logit); past the context, the
// cache restarts from the window's last half and agrees with a forward over
// that half.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "support/fusor_test.hpp"

#include "gpt_decoder.hpp"
#include "gpt_model.hpp"

using namespace fusor;
using namespace fusor_test;

namespace {
using config = gpt::config<96, 16, 32, 4, 2>;
using network_t = nn::network<gpt::model<config>, fp32, space>;
constexpr index_t T = config::context, V = config::vocabulary;

// The network's logits [T, V] for one window (host copy).
std::vector<float> forward_logits(network_t& net, const std::vector<std::int32_t>& window, executor& ex) {
  host_tensor<std::int32_t, dextents<index_t, 2>> ids{dextents<index_t, 2>(1, T)};
  std::fill_n(ids.data(), T, 0);
  std::copy(window.begin(), window.end(), ids.data());
  const auto on_space = to_space(ids);
  const auto out = to_host(net.forward(on_space, ex, nn::evaluation));
  return std::vector<float>(out.data(), out.data() + T * V);
}

void check_position(std::span<const float> got, const std::vector<float>& all, index_t position) {
  float largest = 0;
  for (index_t v = 0; v < V; ++v) largest = std::max(largest, std::abs(all[std::size_t(position * V + v)]));
  float worst = 0;
  for (index_t v = 0; v < V; ++v) worst = std::max(worst, std::abs(got[std::size_t(v)] - all[std::size_t(position * V + v)]));
  INFO("position " << position << ": worst difference " << worst << " (largest logit " << largest << ")");
  CHECK(worst <= 1e-4f * std::max(largest, 1.0f));
}
}  // namespace

TEST_CASE("gpt::decoder with its key/value cache gives the network's logits at every position [" FUSOR_TEST_EXECUTOR_NAME "]") {
  executor ex{};
  network_t net(1, {.seed = 21});
  std::mt19937 engine(5);
  std::uniform_int_distribution<std::int32_t> token(0, std::int32_t(V) - 1);
  std::vector<std::int32_t> text(std::size_t(T + 5));
  for (auto& t : text) t = token(engine);

  gpt::decoder<config> decoder(net);
  const auto whole = forward_logits(net, std::vector<std::int32_t>(text.begin(), text.begin() + T), ex);
  for (index_t p = 0; p < T; ++p) {
    const auto got = decoder.feed(text[std::size_t(p)]);
    REQUIRE(decoder.position() == std::size_t(p + 1));
    check_position(got, whole, p);
  }
  // Full: the next token restarts the cache from the last T/2 tokens, then goes on.
  const std::vector<std::int32_t> restarted(text.begin() + T / 2, text.begin() + T + 1);
  const auto half = forward_logits(net, restarted, ex);
  const auto got = decoder.feed(text[std::size_t(T)]);
  CHECK(decoder.position() == std::size_t(T / 2 + 1));
  check_position(got, half, T / 2);
  CHECK_THROWS_AS(decoder.feed(std::int32_t(V)), fusor::error);
}
