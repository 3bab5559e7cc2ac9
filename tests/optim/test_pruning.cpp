// Magnitude pruning: the fraction of zeros, which ones (the smallest |w|, ties
// to the lower index), ranges respected, gradual pruning keeps what was
// pruned, and pruned weights (and master weights) stay zero through later
// optimizer steps when apply() runs after each.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "optim/optim_support.hpp"

using namespace optim_test;

namespace {

// Indices of the k smallest |w| among `eligible`, ties to the lower index.
std::vector<char> expected_pruned(const std::vector<double>& w, const std::vector<char>& eligible, double fraction) {
  std::vector<index_t> order;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (eligible[i]) order.push_back(index_t(i));
  std::stable_sort(order.begin(), order.end(),
                   [&](index_t a, index_t b) { return std::fabs(w[std::size_t(a)]) < std::fabs(w[std::size_t(b)]); });
  const auto k = std::size_t(std::llround(fraction * double(order.size())));
  std::vector<char> pruned(w.size(), 0);
  for (std::size_t j = 0; j < k; ++j) pruned[std::size_t(order[j])] = 1;
  return pruned;
}

template <class P>
void prune_and_train(double fraction, const optim::index_ranges& ranges) {
  const index_t n = 5003;
  executor ex{};
  const auto host_params = random_flat<P>(n, 81);
  auto params = to_space(host_params);
  const auto w = as_doubles_host(host_params);
  std::vector<char> eligible(std::size_t(n), 0);
  for (const auto& [b, e] : ranges) std::fill(eligible.begin() + b, eligible.begin() + e, char(1));
  const auto pruned = expected_pruned(w, eligible, fraction);

  optim::magnitude_pruning<space> pruning(n, ex_stream(ex));
  CHECK(pruning.parameter_count() == n);
  CHECK(pruning.pruned_count() == 0);
  pruning.prune_smallest(params.view(), fraction, ranges, ex);
  finish(ex);
  const auto after = as_doubles(params);
  const auto mask = as_doubles(pruning.mask());
  index_t zeros = 0;
  for (index_t i = 0; i < n; ++i) {
    const std::size_t u = std::size_t(i);
    if (pruned[u]) {
      ++zeros;
      if (after[u] != 0.0 || mask[u] != 0.0) FAIL_CHECK("element " << i << " should be pruned");
    } else if (after[u] != w[u] || mask[u] != 1.0) {
      FAIL_CHECK("element " << i << " should be kept as " << w[u] << ", is " << after[u]);
    }
  }
  CHECK(pruning.pruned_count() == zeros);
  const auto in_ranges = std::count(eligible.begin(), eligible.end(), char(1));
  CHECK(zeros == std::llround(fraction * double(in_ranges)));

  // Training goes on: the pruned weights (and master weights) stay exactly zero.
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.05f), {}, {}, ex_stream(ex));
  optim::adamw<P, space> optimizer(n);
  optimizer.initialize(params.view(), ex);
  flat_space<P> grads(n);
  for (int s = 0; s < 3; ++s) {
    copy(grads, random_flat<P>(n, std::uint32_t(90 + s)));
    train_step(controller, optimizer, params.view(), grads.view(), ex);
    pruning.apply(params.view(), optimizer, ex);
  }
  finish(ex);
  const auto trained = as_doubles(params);
  std::vector<double> master;
  if constexpr (optim::adamw<P, space>::has_master_weights) master = as_doubles(optimizer.master_weights());
  index_t moved = 0;
  for (index_t i = 0; i < n; ++i) {
    const std::size_t u = std::size_t(i);
    if (pruned[u]) {
      if (trained[u] != 0.0 || (!master.empty() && master[u] != 0.0))
        FAIL_CHECK("pruned element " << i << " came back as " << trained[u]);
    } else {
      moved += trained[u] != after[u];
    }
  }
  CHECK(moved > (n - zeros) / 2);  // the others did train
}

}  // namespace

FUSOR_TEST_CASE("pruning: the smallest magnitudes, and they stay zero through training") {
  prune_and_train<float>(0.3, {{0, 5003}});
  prune_and_train<bfloat16>(0.5, {{0, 5003}});
  prune_and_train<float16>(0.9, {{0, 5003}});
}

FUSOR_TEST_CASE("pruning: only inside the given ranges") {
  // As if [0, 4000) and [4100, 4900) were weight matrices and the rest biases.
  prune_and_train<float>(0.5, {{0, 4000}, {4100, 4900}});
  prune_and_train<bfloat16>(0.25, {{100, 101}, {2000, 3000}});
}

FUSOR_TEST_CASE("pruning: gradual pruning keeps what was pruned before") {
  const index_t n = 1000;
  executor ex{};
  auto host_params = random_flat<float>(n, 85);
  auto params = to_space(host_params);
  optim::magnitude_pruning<space> pruning(n, ex_stream(ex));
  pruning.prune_smallest(params.view(), 0.2, ex);
  const auto first = as_doubles(pruning.mask());
  // The weights change (here: new random values, the pruned ones kept at zero); prune to 50%.
  auto changed = random_flat<float>(n, 86);
  for (index_t i = 0; i < n; ++i)
    if (first[std::size_t(i)] == 0.0) changed.data()[i] = 0.0f;
  copy(params, changed);
  pruning.prune_smallest(params.view(), 0.5, ex);
  const auto second = as_doubles(pruning.mask());
  for (index_t i = 0; i < n; ++i)
    if (first[std::size_t(i)] == 0.0 && second[std::size_t(i)] != 0.0) FAIL_CHECK("element " << i << " came back");
  CHECK(pruning.pruned_count() == 500);
  // Of the 800 kept, the 300 smallest went.
  std::vector<char> eligible(std::size_t(n), 0);
  for (index_t i = 0; i < n; ++i) eligible[std::size_t(i)] = first[std::size_t(i)] != 0.0;
  const auto newly = expected_pruned(as_doubles_host(changed), eligible, 300.0 / 800.0);
  for (index_t i = 0; i < n; ++i)
    if (newly[std::size_t(i)] && second[std::size_t(i)] != 0.0) FAIL_CHECK("element " << i << " should be pruned");
}

FUSOR_TEST_CASE("pruning: apply() zeros pruned elements even when they hold Inf or NaN") {
  const index_t n = 64;
  executor ex{};
  auto params = to_space(random_flat<float>(n, 87));
  optim::magnitude_pruning<space> pruning(n, ex_stream(ex));
  pruning.prune_smallest(params.view(), 0.5, ex);
  const auto mask = as_doubles(pruning.mask());
  auto poisoned = random_flat<float>(n, 88);
  poisoned.data()[std::distance(mask.begin(), std::find(mask.begin(), mask.end(), 0.0))] = INFINITY;
  poisoned.data()[n - 1 - std::distance(mask.rbegin(), std::find(mask.rbegin(), mask.rend(), 0.0))] = NAN;
  copy(params, poisoned);
  pruning.apply(params.view(), ex);
  const auto after = as_doubles(params);
  for (index_t i = 0; i < n; ++i) {
    const double want = mask[std::size_t(i)] == 0.0 ? 0.0 : double(poisoned.data()[i]);
    CHECK(after[std::size_t(i)] == want);
  }
}

FUSOR_TEST_CASE("pruning: errors name the shapes and the range") {
  executor ex{};
  optim::magnitude_pruning<space> pruning(100, ex_stream(ex));
  flat_space<float> wrong(99), right(100);
  expect_error<fusor::shape_error>([&] { pruning.apply(wrong.view(), ex); }, {"[100]", "[99]"});
  expect_error<fusor::shape_error>([&] { pruning.prune_smallest(right.view(), 0.5, {{90, 101}}, ex); },
                                   {"[90, 101)", "[100]"});
  expect_error<fusor::error>([&] { pruning.prune_smallest(right.view(), 1.5, ex); }, {"fraction"});
  // An empty buffer (a placeholder until the real size is known) is fine.
  optim::magnitude_pruning<space> empty(0, ex_stream(ex));
  CHECK(empty.parameter_count() == 0);
  CHECK(empty.pruned_count() == 0);
}
