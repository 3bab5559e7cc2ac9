// examples/gpt_decoder.hpp — text generation from a trained gpt::model one
// token at a time, with a key/value cache: each new token runs the model on
// that token alone, its attention reading the keys and values every earlier
// position left in the cache, instead of rerunning the whole window.
//
//   gpt::decoder<Config> decoder(net);               // copies the parameters (any space) to the host
//   for (token : prompt) logits = decoder.feed(token);
//   next = sample(logits); logits = decoder.feed(next); ...
//
// It computes what nn::network's forward computes at the last position (the
// gpt suite checks the logits position by position), in fp32 on the host:
// generation is one row at a time, latency-bound, and the cache is small
// (blocks x context x 2 x channels floats). When the context is full the
// learned positions cannot slide, so the cache restarts from the last half of
// the window (nanoGPT crops the window the same way).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fusor/core/copy.hpp>
#include <fusor/core/error.hpp>
#include <fusor/nn/parameters.hpp>

#include "gpt_model.hpp"

namespace gpt {

template <class Config>
class decoder {
  static constexpr std::size_t C = Config::channels, T = Config::context, V = Config::vocabulary,
                               H = Config::heads, D = Config::head_dim;

 public:
  template <class Network>
  explicit decoder(const Network& net) {
    net.for_each_parameter([&](const fusor::nn::parameter_slot& slot, const auto& values, const auto&) {
      using element = typename std::remove_cvref_t<decltype(values)>::element_type;
      std::vector<element> host(std::size_t(slot.size));
      fusor::copy(fusor::nn::flat_view<element, fusor::host_space>(host.data(), slot.size), values);
      auto& out = parameters_[slot.name];
      out.resize(host.size());
      for (std::size_t i = 0; i != host.size(); ++i) out[i] = fusor::convert<float>(host[i]);
    });
    keys_.assign(Config::blocks, std::vector<float>(T * C));
    values_.assign(Config::blocks, std::vector<float>(T * C));
  }

  // Forgets every position.
  void reset() {
    position_ = 0;
    history_.clear();
  }
  std::size_t position() const { return position_; }

  // Runs `token` at the next position; returns the logits of the token after it.
  std::span<const float> feed(std::int32_t token) {
    if (token < 0 || std::size_t(token) >= V)
      throw fusor::error("gpt::decoder: token " + std::to_string(token) + " outside [0, " + std::to_string(V) + ")");
    if (position_ == T) restart_from_last_half();
    history_.push_back(token);
    run(token);
    return logits_;
  }

 private:
  const std::vector<float>& parameter(const std::string& name) const {
    const auto it = parameters_.find(name);
    if (it == parameters_.end()) throw fusor::error("gpt::decoder: the network has no parameter " + name);
    return it->second;
  }
  static std::string layer(std::size_t i, const char* rest) { return std::to_string(i) + "." + rest; }

  void restart_from_last_half() {
    const std::vector<std::int32_t> kept(history_.end() - std::ptrdiff_t(T / 2), history_.end());
    reset();
    for (const std::int32_t t : kept) {
      history_.push_back(t);
      run(t);
    }
  }

  // y[Out] = w[Out, In] x[In] + b[Out] (no b: no bias)
  static void linear(std::span<float> y, const std::vector<float>& w, const std::vector<float>* b, std::span<const float> x) {
    const std::size_t in = x.size();
    for (std::size_t o = 0; o != y.size(); ++o) {
      float s = b != nullptr ? (*b)[o] : 0.0f;
      const float* row = w.data() + o * in;
      for (std::size_t i = 0; i != in; ++i) s += row[i] * x[i];
      y[o] = s;
    }
  }
  // PyTorch's LayerNorm: biased variance, epsilon 1e-5.
  static void layernorm(std::span<float> y, std::span<const float> x, const std::vector<float>& w, const std::vector<float>& b) {
    double mean = 0, variance = 0;
    for (const float v : x) mean += v;
    mean /= double(x.size());
    for (const float v : x) variance += (v - mean) * (v - mean);
    const double rstd = 1.0 / std::sqrt(variance / double(x.size()) + 1e-5);
    for (std::size_t i = 0; i != x.size(); ++i) y[i] = float((x[i] - mean) * rstd) * w[i] + b[i];
  }
  static float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  }

  void run(std::int32_t token) {
    const std::size_t p = position_++;
    std::vector<float> x(C), normed(C), qkv(3 * C), attended(C), projected(C), hidden(4 * C);
    const auto& embedding = parameter("0.weight");
    const auto& positions = parameter("1.weight");
    for (std::size_t c = 0; c != C; ++c) x[c] = embedding[std::size_t(token) * C + c] + positions[p * C + c];
    for (std::size_t block = 0; block != Config::blocks; ++block) {
      const std::size_t a = 2 + 2 * block, m = a + 1;  // network positions of the two residuals
      // Attention: this position's query against every cached key, causal by construction.
      layernorm(normed, x, parameter(layer(a, "0.weight")), parameter(layer(a, "0.bias")));
      linear(qkv, parameter(layer(a, "1.weight")), &parameter(layer(a, "1.bias")), normed);
      std::copy_n(qkv.begin() + C, C, keys_[block].begin() + std::ptrdiff_t(p * C));
      std::copy_n(qkv.begin() + 2 * C, C, values_[block].begin() + std::ptrdiff_t(p * C));
      const float scale = 1.0f / std::sqrt(float(D));
      std::vector<float> scores(p + 1);
      for (std::size_t h = 0; h != H; ++h) {
        const float* q = qkv.data() + h * D;
        float largest = -INFINITY;
        for (std::size_t s = 0; s <= p; ++s) {
          const float* k = keys_[block].data() + s * C + h * D;
          float dot = 0;
          for (std::size_t d = 0; d != D; ++d) dot += q[d] * k[d];
          scores[s] = dot * scale;
          largest = std::max(largest, scores[s]);
        }
        float total = 0;
        for (std::size_t s = 0; s <= p; ++s) total += scores[s] = std::exp(scores[s] - largest);
        for (std::size_t d = 0; d != D; ++d) {
          float sum = 0;
          for (std::size_t s = 0; s <= p; ++s) sum += scores[s] * values_[block][s * C + h * D + d];
          attended[h * D + d] = sum / total;
        }
      }
      linear(projected, parameter(layer(a, "3.weight")), &parameter(layer(a, "3.bias")), attended);
      for (std::size_t c = 0; c != C; ++c) x[c] += projected[c];
      // MLP.
      layernorm(normed, x, parameter(layer(m, "0.weight")), parameter(layer(m, "0.bias")));
      linear(hidden, parameter(layer(m, "1.weight")), &parameter(layer(m, "1.bias")), normed);
      for (float& v : hidden) v = gelu_tanh(v);
      linear(projected, parameter(layer(m, "2.weight")), &parameter(layer(m, "2.bias")), hidden);
      for (std::size_t c = 0; c != C; ++c) x[c] += projected[c];
    }
    const std::size_t final_norm = 2 + 2 * Config::blocks;
    layernorm(normed, x, parameter(layer(final_norm, "weight")), parameter(layer(final_norm, "bias")));
    logits_.resize(V);
    linear(logits_, embedding, nullptr, normed);  // the head is tied to the token embedding
  }

  std::map<std::string, std::vector<float>> parameters_;
  std::vector<std::vector<float>> keys_, values_;  // per block: [position][channels]
  std::vector<std::int32_t> history_;
  std::vector<float> logits_;
  std::size_t position_ = 0;
};

}  // namespace gpt
