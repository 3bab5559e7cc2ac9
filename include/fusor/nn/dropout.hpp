// fusor/nn/dropout.hpp — dropout with a counter-based mask: reproducible from
// (seed, step) alone, and never stored.
//
//   nn::dropout<10>        // p = 10/100: in training, y = x * keep / (1 - p)
//   nn::dropout<1, 2>      // p = 1/2
//
// The rate is a fraction of two integers: the layer's type names it exactly
// (0.1 has no exact float), and dropout<10> reads as the percentage it is.
// Element i of step s is kept when nn::random_uniform(seed, s * 2^40 + n * features + i)
// >= p, where n is run_mode::first_sample (the batch's place in the step's whole
// batch: data-parallel ranks and micro-batches draw what one process would; 2^40
// elements a step keep steps apart whatever their batch). The seed comes from the
// network's (network_options::seed and the layer's position); the step from
// run_mode::step, or from *run_mode::device_step when that is set (a CUDA
// graph replays the pointer, not the value; it must point into memory the
// executor reads: host memory for the host executor, device memory for the
// cuda executor). Backward keeps nothing but that step: it draws the same
// mask again, dx = dy * keep / (1 - p). Dropped elements are multiplied by 0
// (a NaN stays NaN, as in PyTorch). Evaluation (run_mode::training false):
// y = x, one copy pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/nn/layer.hpp"
#include "fusor/nn/random.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::nn {

namespace detail {
// y[i] = x[i] * (kept ? scale : 0) over a contiguous range: forward (x, y) and backward (dy, dx).
template <class Element, class Compute>
struct dropout_mask_pass {
  const Element* in;
  Element* out;
  index_t size;
  std::uint64_t seed;
  std::uint64_t step;                // used when device_step is null
  const std::int64_t* device_step;  // read where the pass runs
  std::uint64_t first_element;       // first_sample * features
  float rate;
  Compute scale;

  FUSOR_HOST_DEVICE std::uint64_t current_step() const {
    return device_step != nullptr ? static_cast<std::uint64_t>(*device_step) : step;
  }
  FUSOR_HOST_DEVICE void apply(index_t i, std::uint64_t s) const {
    const bool kept = random_uniform(seed, (s << 40) + first_element + static_cast<std::uint64_t>(i)) >= rate;
    out[i] = convert<Element>(convert<Compute>(in[i]) * (kept ? scale : Compute(0)));
  }
};

template <class Element, class Compute>
void run_dropout_mask(const dropout_mask_pass<Element, Compute>& p, const host_executor& ex) {
  const std::uint64_t s = p.current_step();
  [[maybe_unused]] const int team = ex.thread_count(p.size);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t i = 0; i < p.size; ++i) p.apply(i, s);
}

#if FUSOR_HAS_CUDA
template <class Element, class Compute>
__global__ void dropout_mask_kernel(const dropout_mask_pass<Element, Compute> p) {
  const std::uint64_t s = p.current_step();
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.size; i += index_t(gridDim.x) * blockDim.x)
    p.apply(i, s);
}
template <class Element, class Compute>
void run_dropout_mask(const dropout_mask_pass<Element, Compute>& p, const cuda_executor& ex) {
  gpu::require("nn::dropout on the cuda executor");
  if (p.size == 0) return;
  constexpr int block = 256;
  const index_t grid = std::min<index_t>((p.size + block - 1) / block, index_t(gpu::multiprocessor_count()) * 8);
  dropout_mask_kernel<<<int(grid), block, 0, ex.stream>>>(p);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
#endif
}  // namespace detail

/// Dropout with rate p = RateNumerator / RateDenominator (`dropout<10>` is p = 0.1): in training
/// `y = x * keep / (1 - p)`, in evaluation y = x.
///
/// The mask is counter-based, drawn from the layer's seed, the step and each element's place in the step's whole batch:
/// backward draws it again, so nothing is stored.
template <std::size_t RateNumerator, std::size_t RateDenominator = 100, class... Policies>
struct dropout {
  static_assert(RateDenominator > 0 && RateNumerator < RateDenominator,
                "fusor: nn::dropout<Numerator, Denominator>: the rate Numerator / Denominator must be in [0, 1)");
  /// p, the probability that an element is dropped.
  static constexpr double rate = double(RateNumerator) / double(RateDenominator);
  /// The layer's policies, resolved (nn/policies.hpp).
  using policies = layer_policies<row_major, Policies...>;

  /// Any features.
  template <class F>
  static constexpr bool accepts = is_features_v<F>;
  /// Named in mismatch errors only; any features are accepted, so none occur.
  using expected_input = features<1>;  // any features; never a mismatch
  /// The input features, unchanged.
  template <class F>
  using output = F;

  /// The layer given input features F, the network's precision and a memory Space: no parameters; it keeps its seed and
  /// the last forward's run_mode.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of x and y: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// F, the input features.
    using input_features = F;
    /// F: the output has the input's features.
    using output_features = F;
    /// A batch of x, y, dy or dx.
    using activation = activation_view<precision, F, Space>;

    /// None: the layer has no parameters.
    static std::vector<parameter_spec> parameters() { return {}; }
    /// Does nothing: there are no parameters.
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    /// Does nothing: the mask is drawn again, never stored.
    void reserve(index_t, stream_t) {}
    /// Sets the seed the masks are drawn from (the network calls it once, with a seed derived from its own and the
    /// layer's position).
    void seed(std::uint64_t s) { seed_ = s; }

    /// Training: element i is kept when `random_uniform(seed, step * 2^40 + first_sample * F::size + i) >= p`, and
    /// `y = x * keep / (1 - p)`. Evaluation or p = 0: y = x, one copy pass. Remembers mode for backward.
    template <class Executor>
    void forward(const activation& x, const activation& y, const run_mode& mode, const Executor& ex) {
      last_mode_ = mode;
      if (!mode.training || RateNumerator == 0) {
        assign(y, x, ex);
        return;
      }
      detail::run_dropout_mask(pass(x.data(), y.data(), x.size(), mode), ex);
    }

    /// `dx = dy * keep / (1 - p)` with the last forward's mask drawn again (dx = dy after an evaluation forward, or
    /// with p = 0); nothing when dx is not wanted (`dx.data() == nullptr`).
    template <class Executor>
    void backward(const activation&, const activation&, const activation& dy, const activation& dx,
                  const Executor& ex) {
      if (dx.data() == nullptr) return;
      if (!last_mode_.training || RateNumerator == 0) {
        assign(dx, dy, ex);
        return;
      }
      detail::run_dropout_mask(pass(dy.data(), dx.data(), dy.size(), last_mode_), ex);
    }

    /// The seed the masks are drawn from.
    std::uint64_t seed() const { return seed_; }

   private:
    using element = storage_t<precision>;
    using compute = compute_t<precision>;
    detail::dropout_mask_pass<element, compute> pass(const element* in, element* out, index_t size,
                                                     const run_mode& mode) const {
      return {in,
              out,
              size,
              seed_,
              mode.step,
              mode.device_step,
              std::uint64_t(mode.first_sample) * std::uint64_t(F::size),
              float(rate),
              compute(1.0 / (1.0 - rate))};
    }

    std::uint64_t seed_ = 0;
    run_mode last_mode_{};
  };
};

}  // namespace fusor::nn
