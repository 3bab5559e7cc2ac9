// A GPT split Megatron's way (issue 13): in each attention block the qkv
// projection is column-parallel in three interleaved parts
// (nn::column_parallel<W, 3>: rank r holds [its q heads | its k heads | its v
// heads]), attention runs on H / W heads, and the output projection is
// row-parallel; in each MLP the first matrix is column-parallel and the second
// row-parallel. A small GPT (token and position embeddings, two such blocks
// with H = 4, C = 32, T = 8, a final layernorm and a head) against the unsplit
// network from the same seed: initial parameters (gathered) exactly, logits,
// loss, every parameter's gradient, four all-reduces forward and four backward
// per step (one more for the global norm on several ranks), and AdamW steps
// with clipping by the global norm (trainer.reduce_gradient_norm_with). Over
// comm::single (one way) in the host suite; over MPI at 2 and 4 ranks in
// fusor_gpt_parallel_mpi_tests (FUSOR_TEST_MPI).
#include <fusor/nn/attention.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/position_embedding.hpp>
#include <fusor/nn/residual.hpp>

#include "parallel/tensor_parallel_checks.hpp"

#if defined(FUSOR_TEST_MPI)
#include "comm/mpi_world.hpp"
#else
#include <fusor/comm/single.hpp>
#endif

namespace {
using namespace tensor_parallel_test;

constexpr std::size_t V = 48, T = 8, C = 32, H = 4, D = C / H;

// How a block is split: Ways ranks, each with H / Ways heads.
template <int Ways>
struct split {
  static constexpr std::size_t heads = H / std::size_t(Ways);
  using qkv = nn::parallel<nn::column_parallel<Ways, 3>>;
  using column = nn::parallel<nn::column_parallel<Ways>>;
  using row = nn::parallel<nn::row_parallel<Ways>>;
};
struct whole_block {
  static constexpr std::size_t heads = H;
  using qkv = unsplit;
  using column = unsplit;
  using row = unsplit;
};

template <class S>
using attention_block = nn::residual<nn::layernorm<C>, nn::linear<C, 3 * C, nn::identity, typename S::qkv>,
                                     nn::causal_attention<S::heads, D>, nn::linear<C, C, nn::identity, typename S::row>>;
template <class S>
using mlp_block = nn::residual<nn::layernorm<C>, nn::linear<C, 4 * C, nn::gelu_tanh, typename S::column>,
                               nn::linear<4 * C, C, nn::identity, typename S::row>>;
template <class S>
using small_gpt = nn::sequential<nn::features<T>, nn::embedding<V, C>, nn::position_embedding<T, C>,
                                 attention_block<S>, mlp_block<S>, attention_block<S>, mlp_block<S>, nn::layernorm<C>,
                                 nn::linear<C, V>>;

using qkv_2 = nn::linear<C, 3 * C, nn::identity, split<2>::qkv>;
static_assert(qkv_2::output<nn::features<T, C>>::size == T * 3 * C / 2);

using tokens_extents = extents<index_t, dynamic, T>;

// Token ids [batch, T], the same on every rank.
tensor<std::int32_t, tokens_extents> random_tokens(std::uint32_t seed) {
  tensor<std::int32_t, tokens_extents> ids{tokens_extents(batch)};
  std::mt19937 rng(seed);
  for (index_t i = 0; i < ids.size(); ++i) ids.data()[i] = std::int32_t(rng() % std::uint32_t(V));
  return ids;
}

// The whole parameter from every rank's slice. A slice of column_parallel<W, 3>
// on several ranks is [3, rows / W, ...]: gathered along its axis 1, it is the
// unsplit [3 * rows, ...] in the same order.
template <class Communicator, class Element, class Space>
std::vector<double> gathered_parameter(Communicator& c, const nn::flat_view<Element, Space>& local,
                                       const std::vector<index_t>& local_shape, const std::vector<index_t>& whole_shape) {
  if (local_shape.size() == whole_shape.size() + 1) {
    std::vector<index_t> parts_shape = local_shape;
    parts_shape[1] *= c.size();
    CHECK(parts_shape[0] * parts_shape[1] == whole_shape[0]);
    return gathered(c, local, local_shape, parts_shape);
  }
  return gathered(c, local, local_shape, whole_shape);
}

// max |got - want| / max |want|, for the log.
double largest_relative_difference(const std::vector<double>& got, const std::vector<double>& want) {
  double difference = 0, scale = 0;
  for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
    difference = std::max(difference, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return difference / scale;
}

// The attention blocks' qkv biases ("2.1.bias", "4.1.bias"), and their key part zeroed.
bool is_qkv_bias(const std::string& name) { return name == "2.1.bias" || name == "4.1.bias"; }
void key_part_zeroed(std::vector<double>& bias) { std::fill(bias.begin() + C, bias.begin() + 2 * C, 0.0); }

template <class Communicator, class Split, class Whole>
void expect_same(Communicator& c, const Split& split_net, const Whole& whole, double tol, bool gradients,
                 const std::string& when, bool elementwise = true) {
  const auto reference = parameters_of(whole);
  std::size_t compared = 0;
  split_net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto grads) {
    const parameter_record& want = reference.at(slot.name);
    auto got = gathered_parameter(c, values, slot.shape, want.shape);
    if (tol > 0 && !elementwise && is_qkv_bias(slot.name)) {
      // The keys' bias has no gradient but rounding (q . b_k is the same for
      // every key of a query, which softmax ignores), and AdamW turns that
      // noise into steps of +-lr: compare the queries' and values' parts.
      auto want_qv = want.values;
      key_part_zeroed(got);
      key_part_zeroed(want_qv);
      expect_close_in_norm(got, want_qv, tol, when + " " + slot.name + " (q and v)", c.rank());
    } else if (std::all_of(want.values.begin(), want.values.end(), [](double v) { return v == 0; }))
      CHECK_MESSAGE(got == want.values, when, " ", slot.name);  // a layernorm's bias, still zero
    else if (tol == 0) CHECK_MESSAGE(got == want.values, when, " ", slot.name);
    else if (elementwise) expect_close(got, want.values, tol, when + " " + slot.name, c.rank());
    else expect_close_in_norm(got, want.values, tol, when + " " + slot.name, c.rank());
    if (gradients)
      expect_close(gathered_parameter(c, grads, slot.shape, want.shape), want.gradients, tol,
                   when + " gradient of " + slot.name, c.rank());
    ++compared;
  });
  CHECK(compared == reference.size());
}

double batch_loss(auto& trainer) {
  double loss = 0;
  copy(view<double, extents<index_t>>(&loss), trainer.loss().loss());
  return loss;
}

template <int Ways, class Communicator>
void check_gpt(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size(), ", ", Ways, " ways");
  using split_t = nn::network<small_gpt<split<Ways>>, fp32, host_space>;
  using whole_t = nn::network<small_gpt<whole_block>, fp32, host_space>;
  const fusor::host_executor ex{};

  counting_communicator<Communicator> counting(c);
  split_t split_net(batch, {.seed = 17});
  parallel::tensor_parallel tp(split_net, counting);
  CHECK(tp.split_layers() == 4);  // the four residual blocks
  whole_t whole(batch, {.seed = 17});

  // The qkv slice of rank r: [3, C / W, C] on several ranks (its rows of q, of k, of v).
  split_net.for_each_parameter([&](const nn::parameter_slot& slot, auto, auto) {
    if (slot.name != "2.1.weight") return;
    const std::vector<index_t> want = Ways > 1 ? std::vector<index_t>{3, index_t(C) / Ways, index_t(C)}
                                               : std::vector<index_t>{3 * index_t(C), index_t(C)};
    CHECK(slot.shape == want);
  });
  expect_same(c, split_net, whole, 0.0, false, "initial");

  const auto ids = random_tokens(41);
  const auto logits = host_values(split_net.forward(ids, ex)), want_logits = host_values(whole.forward(ids, ex));
  expect_close(logits, want_logits, 2e-5, "logits", c.rank());
  if (c.rank() == 0) MESSAGE(Ways, " ways: logits differ by ", largest_relative_difference(logits, want_logits), " of the largest");
  CHECK(counting.all_reduces == 4);  // one per row-parallel projection
  counting.all_reduces = 0;

  // AdamW with clipping by the norm of every rank's gradients (a small bound, so that it clips).
  const fusor::optim::trainer_options options{.schedule = fusor::optim::learning_rate_schedule::constant(1e-2f),
                                              .clip = {.max_norm = 0.5f}};
  fusor::optim::trainer<split_t, fusor::optim::adamw> train_split(split_net, options, fusor::optim::adamw_options{});
  fusor::optim::trainer<whole_t, fusor::optim::adamw> train_whole(whole, options, fusor::optim::adamw_options{});
  train_split.reduce_gradient_norm_with(tp);
  train_split.initialize(ex);
  train_whole.initialize(ex);
  constexpr int steps = 4;
  for (int s = 0; s < steps; ++s) {
    const auto xs = random_tokens(100 + std::uint32_t(s));
    const auto labels = random_labels<host_space>(batch * index_t(T), int(V), 200 + std::uint32_t(s));
    counting.all_reduces = 0;
    train_split.step(xs, labels, ex);
    train_whole.step(xs, labels, ex);
    // Four projections' sums forward, four column layers' input gradients backward, and the norm.
    CHECK(counting.all_reduces == 8 + (Ways > 1 ? 1 : 0));
    CHECK(counting.other_calls == 0);
    const double got = batch_loss(train_split), want = batch_loss(train_whole);
    CHECK_MESSAGE(got == doctest::Approx(want).epsilon(1e-5), "step ", s, ": loss ", got, " vs ", want);
    // The gradients of the step are still in the networks after the update (clipped alike).
    if (s == 0) {
      expect_same(c, split_net, whole, 1e-4, true, "after step 1:", false);
      if (c.rank() == 0) {
        // The largest gradient difference over the parameters, relative to each one's largest element.
        const auto reference = parameters_of(whole);
        double worst = 0;
        split_net.for_each_parameter([&](const nn::parameter_slot& slot, auto, auto grads) {
          const auto& want_record = reference.at(slot.name);
          worst = std::max(worst, largest_relative_difference(
                                      gathered_parameter(c, grads, slot.shape, want_record.shape), want_record.gradients));
        });
        MESSAGE(Ways, " ways: step-1 loss ", got, " vs ", want, "; gradients differ by at most ", worst,
                " of their largest element");
      } else {
        split_net.for_each_parameter([&](const nn::parameter_slot& slot, auto, auto grads) {
          (void)gathered_parameter(c, grads, slot.shape, parameters_of(whole).at(slot.name).shape);
        });
      }
      // The keys' bias gradient is rounding noise in both networks.
      const auto gradient = parameters_of(whole).at("2.1.bias").gradients;
      double largest = 0, largest_key = 0;
      for (std::size_t i = 0; i < gradient.size(); ++i) {
        largest = std::max(largest, std::fabs(gradient[i]));
        if (i >= C && i < 2 * C) largest_key = std::max(largest_key, std::fabs(gradient[i]));
      }
      CHECK_MESSAGE(largest_key <= 1e-5 * largest, "key bias gradient ", largest_key, " of ", largest);
    }
  }
  CHECK(train_split.loss().totals().mean_loss == doctest::Approx(train_whole.loss().totals().mean_loss).epsilon(1e-5));
  expect_same(c, split_net, whole, 1e-4, false, "after " + std::to_string(steps) + " steps:", false);
  expect_close(host_values(split_net.forward(ids, ex)), host_values(whole.forward(ids, ex)), 1e-4,
               "logits after training", c.rank());
}
}  // namespace

TEST_CASE("column_parallel<W, 3> names its parts") {
  CHECK(qkv_2::name() == "nn::linear<32, 96> (column_parallel<2, 3>)");
  CHECK(nn::linear<32, 128, nn::gelu_tanh, split<2>::column>::name() == "nn::linear<32, 128> (column_parallel<2>)");
  static_assert(nn::parallel_parts_v<nn::column_parallel<4, 3>> == 3 && nn::parallel_ways_v<nn::column_parallel<4, 3>> == 4);
}

#if defined(FUSOR_TEST_MPI)
TEST_CASE("a GPT split Megatron's way over MPI: equals the unsplit network") {
  auto& c = comm_test::world();
  parallel::dispatch_tensor_parallel<2, 4>(c.size(), {H, 3 * C, 4 * C}, [&]<int Ways>() { check_gpt<Ways>(c); });
}
#else
TEST_CASE("[host] a GPT split Megatron's way over comm::single (one way): equals the unsplit network") {
  fusor::comm::single c;
  check_gpt<1>(c);
}
#endif
