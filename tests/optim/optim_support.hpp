// tests/optim/optim_support.hpp — what the optimizer tests share: flat random
// buffers in the tested space, fp64 copies of them, one training step in the
// documented order, and the textbook algorithms (PyTorch's documented SGD,
// AdamW and warmup-cosine schedule) written out in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <fusor/optim/adamw.hpp>
#include <fusor/optim/pruning.hpp>
#include <fusor/optim/sgd.hpp>
#include <fusor/optim/update_controller.hpp>

#include "support/fusor_test.hpp"

namespace optim_test {

using namespace fusor_test;
namespace optim = fusor::optim;
using flat = dextents<index_t, 1>;
template <class P>
using flat_host = host_tensor<P, flat>;
template <class P>
using flat_space = space_tensor<P, flat>;

inline std::uint64_t launches() { return fusor::gpu::launch_count(); }
#if defined(FUSOR_TEST_CUDA)
inline constexpr bool counts_launches = true;
#else
inline constexpr bool counts_launches = false;
#endif

// An optimizer's fp32 arithmetic against fp64 over a few steps: a few ulps per
// step of values near 1.
inline constexpr double fp32_tolerance = 2e-6;

// The stream an optimizer's state and scalars are made on: the executor's.
inline stream_t ex_stream([[maybe_unused]] const executor& ex) {
#if defined(FUSOR_TEST_CUDA)
  return ex.stream;
#else
  return {};
#endif
}

template <class P>
flat_host<P> random_flat(index_t n, std::uint32_t seed, double low = -1.0, double high = 1.0) {
  flat_host<P> h(n);
  fill_random(h, seed, low, high);
  return h;
}

// Values in P, as doubles: what a reference starts from.
template <class P>
std::vector<double> as_doubles_host(const flat_host<P>& h) {
  std::vector<double> out(std::size_t(h.size()));
  for (index_t i = 0; i < h.size(); ++i) out[std::size_t(i)] = convert<double>(h.data()[i]);
  return out;
}

// One training step, in the order update_controller.hpp documents.
template <class Optimizer, class Params, class Grads>
void train_step(optim::update_controller<space>& controller, Optimizer& optimizer, const Params& params,
                const Grads& grads, const executor& ex) {
  controller.begin_step(ex);
  controller.accumulate_gradient_norm(grads, ex);
  controller.prepare_update(ex);
  optimizer.step(params, grads, controller.scalars(), ex);
  controller.finish_step(ex);
}

inline void check_equal(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected exactly " << want[i]);
      return;
    }
}

// ---- textbook references (fp64) ------------------------------------------------------
// torch.optim.SGD: g += wd * w; b = g (first) or momentum * b + (1 - dampening) * g;
// g = g + momentum * b (Nesterov) or b; w -= lr * g.
struct sgd_reference {
  optim::sgd_options options;
  std::vector<double> w, b;
  bool has_buffer = false;
  void step(const std::vector<double>& grad, double lr) {
    const double momentum = options.momentum, dampening = options.dampening, decay = options.weight_decay;
    if (b.empty()) b.assign(w.size(), 0.0);
    for (std::size_t i = 0; i < w.size(); ++i) {
      double g = grad[i] + decay * w[i];
      if (momentum != 0.0) {
        b[i] = has_buffer ? momentum * b[i] + (1.0 - dampening) * g : g;
        g = options.nesterov ? g + momentum * b[i] : b[i];
      }
      w[i] -= lr * g;
    }
    has_buffer = true;
  }
};

// torch.optim.AdamW: w *= 1 - lr * wd; m, v moving averages; bias corrections with t.
struct adamw_reference {
  optim::adamw_options options;
  std::vector<double> w, m, v;
  int t = 0;
  void step(const std::vector<double>& grad, double lr) {
    const double b1 = options.beta1, b2 = options.beta2, eps = options.epsilon, decay = options.weight_decay;
    if (m.empty()) m.assign(w.size(), 0.0), v.assign(w.size(), 0.0);
    ++t;
    const double c1 = 1.0 - std::pow(b1, t), c2 = 1.0 - std::pow(b2, t);
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] *= 1.0 - lr * decay;
      m[i] = b1 * m[i] + (1.0 - b1) * grad[i];
      v[i] = b2 * v[i] + (1.0 - b2) * grad[i] * grad[i];
      w[i] -= (lr / c1) * m[i] / (std::sqrt(v[i]) / std::sqrt(c2) + eps);
    }
  }
};

// Linear warmup from peak/W (step 0) to peak (step W-1), cosine to final at T.
inline double warmup_cosine_reference(double peak, index_t warmup, index_t total, double final_lr, index_t step) {
  const double pi = 3.14159265358979323846;
  if (step < warmup) return peak * double(step + 1) / double(warmup);
  if (step >= total) return final_lr;
  return final_lr + 0.5 * (peak - final_lr) * (1.0 + std::cos(pi * double(step - warmup) / double(total - warmup)));
}

template <class P>
const char* precision_name() {
  if constexpr (std::is_same_v<storage_t<P>, bfloat16>) return "bf16";
  else if constexpr (std::is_same_v<storage_t<P>, float16>) return "fp16";
  else return "fp32";
}

// The elements of `master` rounded to P, as doubles: what 16-bit parameters must hold.
template <class P>
std::vector<double> rounded_to(const std::vector<double>& master) {
  std::vector<double> out(master.size());
  for (std::size_t i = 0; i < master.size(); ++i)
    out[i] = convert<double>(convert<storage_t<P>>(static_cast<float>(master[i])));
  return out;
}

// A step in parts (begin_step, then step_part over pieces, out of order) ends
// bit for bit where one whole step does, state included: what ZeRO's in-place
// update relies on. A part outside the state or with other gradients is refused.
template <template <class, class> class Optimizer, class P, class Options>
void check_step_in_parts(const Options& options) {
  const index_t n = 1001;
  const index_t pieces[][2] = {{600, 1001}, {0, 17}, {17, 600}};
  const auto host_params = random_flat<P>(n, 31);
  auto whole_params = to_space(host_params), part_params = to_space(host_params);
  flat_space<P> grads(n);
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.05f), {}, {}, ex_stream(ex));
  Optimizer<P, space> whole(n, options, ex_stream(ex)), parts(n, options, ex_stream(ex));
  whole.initialize(whole_params.view(), ex);
  parts.initialize(part_params.view(), ex);
  const auto piece = [](const auto& v, index_t begin, index_t end) {
    return optim::flat_view<P, space>(v.data() + begin, end - begin);
  };
  for (int s = 0; s < 3; ++s) {
    copy(grads, random_flat<P>(n, std::uint32_t(300 + s)));
    controller.begin_step(ex);
    controller.accumulate_gradient_norm(grads, ex);
    controller.prepare_update(ex);
    whole.step(whole_params.view(), grads.view(), controller.scalars(), ex);
    parts.begin_step(controller.scalars(), ex);
    for (const auto& [begin, end] : pieces)
      parts.step_part(begin, piece(part_params, begin, end), piece(grads, begin, end), controller.scalars(), ex);
    controller.finish_step(ex);
  }
  finish(ex);
  const std::string what = std::string("a step in parts, ") + precision_name<P>();
  check_equal(as_doubles(part_params), as_doubles(whole_params), what + ": parameters");
  std::vector<std::vector<double>> whole_state;
  whole.for_each_state([&](const char*, const auto& v) { whole_state.push_back(as_doubles(v)); });
  std::size_t k = 0;
  parts.for_each_state([&](const char* name, const auto& v) {
    REQUIRE(k < whole_state.size());
    check_equal(as_doubles(v), whole_state[k++], what + ": " + name);
  });
  CHECK(k == whole_state.size());
  CHECK(k > 0);
  expect_error<fusor::shape_error>(
      [&] { parts.step_part(995, piece(part_params, 0, 10), piece(grads, 0, 10), controller.scalars(), ex); },
      {"made for 1001 parameters", "[995, 1005)"});
  expect_error<fusor::shape_error>(
      [&] { parts.step_part(0, piece(part_params, 0, 10), piece(grads, 0, 9), controller.scalars(), ex); },
      {"a step of 10 parameters", "[9]"});
}

}  // namespace optim_test
