// parallel::data_parallel over comm::single (one rank, no MPI): equal to
// optim::trainer under every configuration (buckets, overlap, micro-batches,
// ZeRO-1, clipping), bf16 communication within bf16's rounding, the timeline,
// memory and errors; the bucket planner on its own; PowerSGD's Gram-Schmidt
// kernel under the SIMT emulator.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <fusor/comm/single.hpp>
#include <fusor/kernels/simt_emulator.hpp>
#include <fusor/parallel/gradient_buckets.hpp>

#include "parallel/data_parallel_cases.hpp"
#include "parallel/data_parallel_reports.hpp"
#include "parallel/nonfinite_checks.hpp"
#include "parallel/powersgd_cases.hpp"

using namespace dp_test;

TEST_CASE("data_parallel over comm::single equals optim::trainer (AdamW, SGD with momentum)") {
  fusor::comm::single c;
  check_equals_one_rank<optim::adamw>(c, optim::adamw_options{.weight_decay = 0.01f}, "AdamW");
  check_equals_one_rank<optim::sgd>(c, optim::sgd_options{.momentum = 0.9f, .weight_decay = 1e-3f}, "SGD momentum");
}

TEST_CASE("data_parallel over comm::single: clipping by global norm") {
  fusor::comm::single c;
  check_clipping(c);
}

TEST_CASE("data_parallel over comm::single: dropout draws one process's masks") {
  fusor::comm::single c;
  check_dropout_equals_one_rank(c);
}

TEST_CASE("data_parallel over comm::single: bf16 communication differs only by bf16 rounding") {
  fusor::comm::single c;
  check_bf16_explained_by_rounding(c);
  check_bf16_adamw(c);
}

TEST_CASE("data_parallel over comm::single: timeline, bucket plans, memory, errors, accessors, no allocation in a step") {
  fusor::comm::single c;
  check_timeline(c);
  check_bucket_plans(c);
  check_memory(c);
  check_memory_against_zero_paper<fp32>(c);
  check_memory_against_zero_paper<bf16>(c);
  check_zero3_uneven_evaluation(c);
  check_errors(c);
  check_accessors_and_allocation(c);
}

TEST_CASE("plan_buckets: whole layers in reverse order, padded layout for ZeRO-1, tiling checked") {
  using fusor::parallel::layer_range;
  using fusor::parallel::plan_buckets;
  // Layers 0..3 of 64, 96 (layer 1 has none), 32 and 128 elements, given in reverse.
  const std::vector<layer_range> layers = {{4, 192, 320}, {3, 160, 192}, {2, 64, 160}, {0, 0, 64}};
  const auto one_each = plan_buckets(layers, 4, 1, 1);
  REQUIRE(one_each.buckets.size() == 4);
  CHECK(one_each.buckets[0].lowest_layer == 4);
  CHECK(one_each.buckets[3].lowest_layer == 0);
  CHECK(!one_each.padded());
  CHECK(one_each.padded_size == 320);
  for (const auto& b : one_each.buckets) CHECK(b.padded_begin == b.begin);

  // 512 bytes: layer 4 (128 x 4 bytes) fills a bucket, 3 and 2 share one (128 elements), 0 alone would
  // make 192 elements (768 bytes), too many.
  const auto grouped = plan_buckets(layers, 4, 512, 1);
  REQUIRE(grouped.buckets.size() == 3);
  CHECK(grouped.buckets[1].highest_layer == 3);
  CHECK(grouped.buckets[1].lowest_layer == 2);
  CHECK(grouped.buckets[1].begin == 64);
  CHECK(grouped.buckets[1].end == 192);
  // A layer larger than the bucket size is a bucket of its own; the rest still share.
  const auto small = plan_buckets(layers, 4, 200, 1);
  CHECK(small.buckets.size() == 4);
  CHECK(plan_buckets(layers, 4, index_t{1} << 30, 1).buckets.size() == 1);

  // Padded to 3 ranks: 64 -> 66, 96 -> 96, 32 -> 33, 128 -> 129, in buffer order.
  const auto zero = plan_buckets(layers, 4, 1, 3);
  CHECK(zero.padded());
  CHECK(zero.padded_size == 66 + 96 + 33 + 129);
  CHECK(zero.shard_size() == zero.padded_size / 3);
  CHECK(zero.buckets[3].padded_begin == 0);
  CHECK(zero.buckets[2].padded_begin == 66);
  CHECK(zero.buckets[1].padded_begin == 66 + 96);
  CHECK(zero.buckets[0].padded_begin == 66 + 96 + 33);
  CHECK(zero.buckets[0].padded_size == 129);

  const std::vector<layer_range> gap = {{2, 100, 200}, {0, 0, 64}};
  expect_error<fusor::error>([&] { plan_buckets(gap, 4, 1, 1); }, {"layer 0", "[0, 64)", "100"});
  expect_error<fusor::error>([&] { plan_buckets(layers, 4, 0, 1); }, {"bucket_bytes", "not 0"});
}

TEST_CASE("PowerSGD over comm::single: the algorithm in double, and data_parallel with it") {
  fusor::comm::single c;
  check_powersgd_against_reference(c);
  check_powersgd_training(c);
}

TEST_CASE("PowerSGD's Gram-Schmidt on the GPU (its kernel's body under the SIMT emulator) against the host's") {
  namespace pd = fusor::parallel::detail;
  // 600 rows: each of the block's 256 threads owns two or three; rank 5.
  const index_t n = 600, r = 5;
  std::vector<float> gpu(std::size_t(n * r)), host(std::size_t(n * r));
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : gpu) v = dist(rng);
  host = gpu;
  pd::orthogonalize_columns(pd::pmatrix<fusor::host_space>(host.data(), n, r), fusor::host_executor{});
  fusor::detail::emulate_kernel(fusor::detail::simt_grid{1, 1}, pd::orthogonalize_threads, 0, [&](unsigned char*) {
    pd::orthogonalize_columns_block<fusor::detail::emulated_simt>(gpu.data(), n, int(r));
  });
  double worst = 0, worst_gram = 0;
  for (std::size_t e = 0; e < gpu.size(); ++e) worst = std::max(worst, std::abs(double(gpu[e]) - double(host[e])));
  for (index_t i = 0; i < r; ++i)
    for (index_t j = 0; j < r; ++j) {  // the kernel's columns are orthonormal
      double dot = 0;
      for (index_t k = 0; k < n; ++k)
        dot += double(gpu[std::size_t(k * r + i)]) * double(gpu[std::size_t(k * r + j)]);
      worst_gram = std::max(worst_gram, std::abs(dot - (i == j ? 1.0 : 0.0)));
    }
  CAPTURE(worst);
  CAPTURE(worst_gram);
  CHECK(worst < 1e-5);
  CHECK(worst_gram < 1e-5);
}

TEST_CASE("data_parallel and pipeline over comm::single: Inf/NaN gradients stop (or skip) the step") {
  fusor::comm::single one;
  nonfinite_test::check_parallel_cases(one);
}
