// tests/parallel/powersgd_cases.hpp — PowerSGD (parallel/powersgd.hpp), for any
// communicator: over comm::single, under mpirun (2, 3, 4 ranks), over NCCL.
//   - The compressor against the algorithm written out in double: every rank's
//     gradients are drawn from (step, rank), so each rank computes every other
//     rank's and the exact result; two steps, so that the error feedback and
//     the warm-started Q of the first step shape the second. Two matrices (their
//     factors packed side by side) and two tensors sent whole (a vector, and a
//     matrix too small to gain from compression).
//   - data_parallel with PowerSGD: its warm-up steps are the uncompressed run's
//     bit for bit; compressed, it trains (the loss falls, close to the
//     uncompressed run's); its bytes per step are the factors' and the vectors';
//     with ZeRO-1 it is refused.
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include <fusor/parallel/powersgd.hpp>

#include "parallel/data_parallel_checks.hpp"

namespace dp_test {

namespace powersgd_test {

struct shape {
  const char* name;
  std::vector<index_t> dims;
  bool compressed;  // at rank 2: 2 r (n + m) <= n m
};
inline const std::vector<shape>& shapes() {
  static const std::vector<shape> s{{"w", {12, 10}, true}, {"b", {7}, false}, {"tiny", {3, 4}, false}, {"w2", {6, 16}, true}};
  return s;
}
inline constexpr int rank = 2;

inline index_t elements(const shape& s) {
  index_t n = 1;
  for (index_t d : s.dims) n *= d;
  return n;
}
// Rank k's gradient of tensor t at step s.
inline std::vector<double> gradient(int step, int k, std::size_t t) {
  std::vector<double> g(std::size_t(elements(shapes()[t])));
  std::mt19937 rng(std::uint32_t(1000 * step + 10 * k + int(t)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (double& x : g) x = u(rng);
  return g;
}

// Modified Gram-Schmidt on the columns of p (n x r, row-major).
inline void orthonormalize(std::vector<double>& p, index_t n, index_t r) {
  for (index_t i = 0; i < r; ++i)
    for (index_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (index_t k = 0; k < n; ++k) dot += p[std::size_t(k * r + i)] * p[std::size_t(k * r + j)];
      for (index_t k = 0; k < n; ++k)
        p[std::size_t(k * r + i)] = j < i ? p[std::size_t(k * r + i)] - dot * p[std::size_t(k * r + j)]
                                          : p[std::size_t(k * r + i)] / (std::sqrt(dot) + 1e-8);
    }
}

// One matrix's PowerSGD, in double, for `ranks` ranks.
struct reference_matrix {
  index_t n, m;
  std::vector<double> q;                   // m x r
  std::vector<std::vector<double>> error;  // each rank's, n x m

  // The compressed sum of the ranks' gradients g[k] (n x m each).
  std::vector<double> step(const std::vector<std::vector<double>>& g) {
    const std::size_t ranks = g.size();
    if (error.empty()) error.assign(ranks, std::vector<double>(std::size_t(n * m), 0.0));
    std::vector<std::vector<double>> mk(ranks);
    for (std::size_t k = 0; k < ranks; ++k) {
      mk[k] = g[k];
      for (std::size_t i = 0; i < mk[k].size(); ++i) mk[k][i] += error[k][i];
    }
    std::vector<double> p(std::size_t(n * rank), 0.0);
    for (const auto& mm : mk)
      for (index_t i = 0; i < n; ++i)
        for (index_t c = 0; c < rank; ++c)
          for (index_t j = 0; j < m; ++j) p[std::size_t(i * rank + c)] += mm[std::size_t(i * m + j)] * q[std::size_t(j * rank + c)];
    orthonormalize(p, n, rank);
    std::fill(q.begin(), q.end(), 0.0);
    for (const auto& mm : mk)
      for (index_t j = 0; j < m; ++j)
        for (index_t c = 0; c < rank; ++c)
          for (index_t i = 0; i < n; ++i) q[std::size_t(j * rank + c)] += mm[std::size_t(i * m + j)] * p[std::size_t(i * rank + c)];
    std::vector<double> approximation(std::size_t(n * m), 0.0);
    for (index_t i = 0; i < n; ++i)
      for (index_t j = 0; j < m; ++j)
        for (index_t c = 0; c < rank; ++c)
          approximation[std::size_t(i * m + j)] += p[std::size_t(i * rank + c)] * q[std::size_t(j * rank + c)];
    for (std::size_t k = 0; k < ranks; ++k)
      for (std::size_t i = 0; i < approximation.size(); ++i) error[k][i] = mk[k][i] - approximation[i] / double(ranks);
    return approximation;
  }
};

}  // namespace powersgd_test

template <class Communicator>
void check_powersgd_against_reference(Communicator& c, executor ex = {}) {
  using namespace powersgd_test;
  nn::parameter_group<float, space> group;
  for (const shape& s : shapes()) group.add(s.name, s.dims);
  group.allocate({});
  const parallel::powersgd_options options{.rank = rank, .seed = 5};
  parallel::powersgd<float, space> compressor(group, options, {});
  CHECK(compressor.compressed_matrices() == 2);
  // 2 r (n + m) factors' values for w and w2, the others whole.
  CHECK(compressor.bytes_per_step() == index_t(sizeof(float)) * (rank * (12 + 10) + rank * (6 + 16) + 7 + 12));

  // The reference's Q: the compressor's draws, in the order of its matrices.
  std::vector<reference_matrix> reference;
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<float> normal;
  for (const shape& s : shapes()) {
    if (!s.compressed) continue;
    reference_matrix r{s.dims[0], s.dims[1], std::vector<double>(std::size_t(s.dims[1] * rank)), {}};
    for (double& x : r.q) x = normal(rng);
    reference.push_back(r);
  }

  parallel::stream_order order;
  for (int step = 0; step < 2; ++step) {
    INFO("step ", step, ", rank ", c.rank(), " of ", c.size());
    // This rank's gradients in, poison in the padding (it must stay out of every sum).
    host_tensor<float, dextents<index_t, 1>> mine{dextents<index_t, 1>(group.size())};
    std::fill(mine.data(), mine.data() + group.size(), 0.0f);
    for (std::size_t t = 0; t < shapes().size(); ++t) {
      const auto g = gradient(step, c.rank(), t);
      std::copy(g.begin(), g.end(), mine.data() + group.slots()[t].offset);
    }
    copy(group.gradients(), mine.view());
    compressor.reduce(group.gradients(), group.gradients(), c, order, ex);
    finish(ex);
    const auto got = to_host(group.gradients());

    std::size_t matrix = 0;
    for (std::size_t t = 0; t < shapes().size(); ++t) {
      std::vector<std::vector<double>> all;
      for (int k = 0; k < c.size(); ++k) all.push_back(gradient(step, k, t));
      std::vector<double> want(all[0].size(), 0.0);
      if (shapes()[t].compressed) {
        want = reference[matrix++].step(all);
      } else {
        for (const auto& g : all)
          for (std::size_t i = 0; i < g.size(); ++i) want[i] += g[i];
      }
      double scale = 0, worst = 0;
      for (double w : want) scale = std::max(scale, std::fabs(w));
      for (std::size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::fabs(double(got.data()[group.slots()[t].offset + index_t(i)]) - want[i]));
      INFO(std::string(shapes()[t].name), ": largest difference ", worst, " of a largest value ", scale);
      CHECK(worst <= 1e-4 * scale);
    }
  }
}

// data_parallel with PowerSGD on the test MLP: layers 0 and 2's weights are
// compressed at rank 4 (32 x 20, 24 x 32), layer 3's (5 x 24) is too small.
template <class Communicator>
void check_powersgd_training(Communicator& c) {
  const auto t = trainer_options(1e-2f);
  const optim::adamw_options o{};
  constexpr int steps_run = 12;
  const run_result native = train_data_parallel<optim::adamw>(c, t, o, {}, steps_run);
  const parallel::data_parallel_options warm{.communication = parallel::gradient_communication::powersgd,
                                             .powersgd = {.rank = 4, .warmup_steps = steps_run}};
  const run_result warming = train_data_parallel<optim::adamw>(c, t, o, warm, steps_run);
  INFO("rank ", c.rank(), " of ", c.size());
  CHECK(largest_difference(warming.parameters, native.parameters) == 0.0);  // never compressed: the same steps

  parallel::data_parallel_options compressed = warm;
  compressed.powersgd.warmup_steps = 2;
  const run_result r = train_data_parallel<optim::adamw>(c, t, o, compressed, steps_run);
  // Factors: 4 (32 + 20) + 4 (24 + 32); whole: the biases (32, 24, 5) and layer 3's weight (120).
  CHECK(r.bytes_per_step == index_t(sizeof(float)) * (4 * (32 + 20) + 4 * (24 + 32) + 32 + 24 + 5 + 120));
  CHECK(r.bytes_per_step * 2 < native.bytes_per_step);
  // It trains as the uncompressed run does, closely: the mean loss over the steps.
  INFO("mean loss: PowerSGD ", r.totals.mean_loss, ", uncompressed ", native.totals.mean_loss);
  CHECK(std::fabs(r.totals.mean_loss - native.totals.mean_loss) <= 0.005 * native.totals.mean_loss);
  CHECK(largest_difference(r.parameters, native.parameters) > 0.0);  // and it did compress

  network_t net(global_batch, {.seed = seed});
  expect_error<fusor::error>(
      [&] {
        parallel::data_parallel<network_t, optim::adamw, Communicator> bad(
            net, c, t, o, {.communication = parallel::gradient_communication::powersgd, .shard_optimizer_state = true});
      },
      {"PowerSGD", "ZeRO-1", "choose one"});
}

}  // namespace dp_test
