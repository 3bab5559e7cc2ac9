// fusor/optim/pruning.hpp — magnitude pruning: a 0/1 mask per flat parameter
// buffer, chosen from the weights' magnitudes, and applied as one fused pass
// after every optimizer step so pruned weights stay exactly zero.
//
//   optim::magnitude_pruning<space> pruning(params.size());
//   pruning.prune_smallest(params, 0.5, {{0, 4096}}, ex);  // half of the first 4096 weights
//   ... every step, after optimizer.step(...):
//   pruning.apply(params, optimizer, ex);  // params and the optimizer's master weights
//
// The mask is one byte per parameter (uint8): a quarter of an fp32 mask's
// traffic in the per-step pass (half of a bf16 one), and exactly 0 or 1.
// Pruned elements are set with where(mask, w, 0), so they become exactly +0
// even when they held Inf or NaN.
//
// prune_smallest(params, fraction[, ranges]) prunes k = round(fraction * n)
// of the n eligible elements (all, or those in the [begin, end) ranges): the
// k smallest |w|, ties to the lower index, NaN counting as the largest.
// Elements pruned before count first and stay pruned, so calling it with a
// growing fraction prunes gradually. It copies the weights to the host and
// picks there (O(n)): a model-surgery call between steps, never inside a
// captured step. Its final apply() masks `params` only; with master weights,
// call apply(params, optimizer, ex) as well (every step does anyway).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fusor/core/copy.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/error.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/optim/flat_state.hpp"

namespace fusor::optim {

template <class Precision, class Space>
class adamw;  // optim/adamw.hpp; named by the instances at the end of this file

/// [begin, end) ranges of element indices.
using index_ranges = std::vector<std::pair<index_t, index_t>>;

/// Magnitude pruning of one flat parameter buffer: a 0/1 byte mask in `Space`, chosen by prune_smallest and
/// applied after every optimizer step so that pruned weights stay exactly zero.
template <class Space = host_space>
class magnitude_pruning {
 public:
  /// A flat view of the mask: one byte per parameter, 1 kept, 0 pruned.
  using mask_view = flat_view<std::uint8_t, Space>;

  /// A mask of `parameter_count` ones (nothing pruned), allocated on `stream`; waits for it.
  explicit magnitude_pruning(index_t parameter_count, stream_t stream = {})
      : mask_(dextents<index_t, 1>(parameter_count), stream) {
    if (parameter_count == 0) return;
    flat_tensor<std::uint8_t, host_space> ones{dextents<index_t, 1>(parameter_count)};
    std::fill_n(ones.data(), parameter_count, std::uint8_t(1));
    wait_for_stream();  // the mask was allocated in the stream's order
    copy(mask_, ones);
  }

  /// prune_smallest over all the parameters.
  template <class View, class Ex>
  void prune_smallest(const View& params, double fraction, const Ex& executor) {
    prune_smallest(params, fraction, index_ranges{{0, parameter_count()}}, executor);
  }

  /// Prunes k = round(fraction * n) of the n elements in `ranges`: the k smallest |w|, ties to the lower
  /// index, NaN counting as the largest; elements pruned before count first and stay pruned. Then masks
  /// `params`. Waits for the executor and picks on the host: between steps, never inside a captured one.
  /// Throws fusor::error for a fraction outside [0, 1], shape_error for a range outside the parameters.
  template <class View, class Ex>
  void prune_smallest(const View& params, double fraction, const index_ranges& ranges, const Ex& executor);

  /// params = where(mask, params, 0): one fused pass.
  template <class View, class Ex>
  void apply(const View& params, const Ex& executor) const;
  /// The parameters and the optimizer's master weights (if it keeps them) in one pass.
  template <class View, class Optimizer, class Ex>
  void apply(const View& params, const Optimizer& optimizer, const Ex& executor) const;

  /// The mask: 1 kept, 0 pruned.
  mask_view mask() const { return mask_.view(); }
  /// How many parameters the mask covers.
  index_t parameter_count() const { return mask_.size(); }
  /// Pruned elements, counted on the host (copies the mask; not for inside a step).
  index_t pruned_count() const {
    wait_for_stream();
    const auto m = host_copy(mask_.view());
    return index_t(std::count(m.data(), m.data() + m.size(), std::uint8_t(0)));
  }

 private:
  template <class V>
  void check(const V& v, const char* what) const {
    static_assert(V::rank == 1, "fusor: magnitude_pruning works on flat (1-D) parameter buffers");
    if (v.size() != parameter_count())
      throw shape_error(std::string("fusor: magnitude_pruning was made for shape [") +
                        std::to_string(parameter_count()) + "], but the " + what + " have shape [" +
                        std::to_string(v.size()) + "]");
  }
  template <class V>
  static auto host_copy(const V& v) {
    flat_tensor<typename V::element_type, host_space> h{dextents<index_t, 1>(v.size())};
    copy(h, v);
    return h;
  }
  void wait_for_stream() const {
#if FUSOR_HAS_CUDA
    if constexpr (Space::device_accessible) FUSOR_CUDA_CHECK(cudaStreamSynchronize(mask_.stream()));
#endif
  }
  template <class Ex>
  static void finish_work([[maybe_unused]] const Ex& executor) {
    if constexpr (requires { executor.synchronize(); }) executor.synchronize();
  }

  flat_tensor<std::uint8_t, Space> mask_;
};


// The members that launch work or pick on the host, outside the class so
// that they are not inline: an `extern template` (below) keeps a program
// from compiling them again.
template <class Space>
template <class View, class Ex>
void magnitude_pruning<Space>::prune_smallest(const View& params, double fraction, const index_ranges& ranges, const Ex& executor) {
  const auto& p = as_view(params);
  check(p, "parameters");
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw error("fusor: prune_smallest needs a fraction in [0, 1], got " + std::to_string(fraction));
  const index_t n = parameter_count();
  std::vector<char> eligible(std::size_t(n), 0);
  for (const auto& [begin, end] : ranges) {
    if (begin < 0 || end < begin || end > n)
      throw shape_error("fusor: prune_smallest range [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") is not inside the parameters' shape [" + std::to_string(n) + "]");
    std::fill(eligible.begin() + begin, eligible.begin() + end, char(1));
  }
  finish_work(executor);
  const auto host_params = host_copy(p);
  auto host_mask = host_copy(mask_.view());
  // Candidates ordered by (already pruned first, |w| with NaN last, index).
  struct candidate {
    bool pruned;
    double magnitude;
    index_t index;
  };
  std::vector<candidate> candidates;
  for (index_t i = 0; i < n; ++i) {
    if (!eligible[std::size_t(i)]) continue;
    const double m = std::fabs(convert<double>(host_params.data()[i]));
    candidates.push_back({host_mask.data()[i] == 0, std::isnan(m) ? INFINITY : m, i});
  }
  const auto k = index_t(std::llround(fraction * double(candidates.size())));
  const auto before = [](const candidate& a, const candidate& b) {
    if (a.pruned != b.pruned) return a.pruned;
    if (a.magnitude != b.magnitude) return a.magnitude < b.magnitude;
    return a.index < b.index;
  };
  if (k > 0) {
    std::nth_element(candidates.begin(), candidates.begin() + (k - 1), candidates.end(), before);
    for (index_t j = 0; j < k; ++j) host_mask.data()[candidates[std::size_t(j)].index] = 0;
  }
  copy(mask_, host_mask);
  apply(p, executor);
}
template <class Space>
template <class View, class Ex>
void magnitude_pruning<Space>::apply(const View& params, const Ex& executor) const {
  const auto& p = as_view(params);
  check(p, "parameters");
  assign(p, where(mask_.view(), p, 0), executor);
}
template <class Space>
template <class View, class Optimizer, class Ex>
void magnitude_pruning<Space>::apply(const View& params, const Optimizer& optimizer, const Ex& executor) const {
  const auto& p = as_view(params);
  check(p, "parameters");
  if constexpr (Optimizer::has_master_weights) {
    const auto master = optimizer.master_weights();
    check(master, "master weights");
    assign_many(executor, out(p, where(mask_.view(), p, 0)), out(master, where(mask_.view(), master, 0)));
  } else {
    apply(p, executor);
  }
}

// What optim::trainer uses for a group of fp32 or bf16 parameters with AdamW,
// compiled once: the host's in fusor::runtime (src/optim.cpp), the GPU's in
// fusor::cuda_runtime (src/cuda/optim.cu). PREFIX is `extern` here.
#define FUSOR_PRUNING_INSTANCES(PREFIX, E, S, Executor)                                                            \
  PREFIX template void magnitude_pruning<S>::prune_smallest<flat_view<E, S>, Executor>(                            \
      const flat_view<E, S>&, double, const index_ranges&, const Executor&);                                       \
  PREFIX template void magnitude_pruning<S>::apply<flat_view<E, S>, adamw<E, S>, Executor>(                        \
      const flat_view<E, S>&, const adamw<E, S>&, const Executor&) const
#define FUSOR_PRUNING_HOST_INSTANCES(PREFIX) FUSOR_PRUNING_INSTANCES(PREFIX, float, host_space, host_executor)
#define FUSOR_PRUNING_CUDA_INSTANCES(PREFIX)                           \
  FUSOR_PRUNING_INSTANCES(PREFIX, float, device_space, cuda_executor); \
  FUSOR_PRUNING_INSTANCES(PREFIX, __nv_bfloat16, device_space, cuda_executor)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_PRUNING_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_PRUNING_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::optim
