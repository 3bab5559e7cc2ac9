// tests/parallel/tensor_parallel_checks.hpp — the tensor-parallel checks, written
// once for any communicator, memory space and executor: the MPI binary runs them
// at 2 and 4 ranks, the host suite with comm::single (one way), the CUDA one over
// comm::nccl. Each rank also builds the unsplit network from the same seed and
// runs it alone: the split network must compute the same outputs, input
// gradient, parameter gradients (gathered from the slices) and, trained, the
// same parameters. Checks use CHECK, never REQUIRE: a rank that stops early
// would leave the others waiting in a collective.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>
#include <fusor/optim/adamw.hpp>
#include <fusor/optim/sgd.hpp>
#include <fusor/optim/trainer.hpp>
#include <fusor/parallel/tensor_parallel.hpp>

#include "support/fusor_test.hpp"

namespace tensor_parallel_test {

using namespace fusor_test;
namespace nn = fusor::nn;
namespace parallel = fusor::parallel;

template <int W>
using column = nn::parallel<nn::column_parallel<W>>;
template <int W>
using row = nn::parallel<nn::row_parallel<W>>;
using unsplit = nn::parallel<nn::no_parallel>;

// Two column -> row blocks, 64-128-64-128-32, between them every activation path
// of a split layer: fused relu / gelu and a separate tanh on the column side;
// tanh, relu and gelu after the sum, and none, on the row side.
template <class Column, class Row>
using mlp = nn::sequential<nn::features<64>, nn::linear<64, 128, nn::relu, Column>,
                           nn::linear<128, 64, nn::tanh_activation, Row>, nn::linear<64, 128, nn::gelu_tanh, Column>,
                           nn::linear<128, 32, nn::identity, Row>>;
template <class Column, class Row>
using mlp_other = nn::sequential<nn::features<64>, nn::linear<64, 128, nn::tanh_activation, Column>,
                                 nn::linear<128, 64, nn::relu, Row>, nn::linear<64, 128, nn::identity, Column>,
                                 nn::linear<128, 32, nn::gelu_tanh, Row>>;

inline constexpr index_t batch = 12;

template <class Executor>
void wait_for([[maybe_unused]] const Executor& ex) {
  if constexpr (requires { ex.synchronize(); }) ex.synchronize();
}
using input_extents = extents<index_t, dynamic, 64>;
using flat = dextents<index_t, 1>;

// Counts the collectives a communicator is asked for, passing each on.
template <class Communicator>
class counting_communicator {
 public:
  explicit counting_communicator(Communicator& inner) : inner_(inner) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  int local_rank() const { return inner_.local_rank(); }
  template <class... A>
  auto all_reduce(const A&... a) {
    ++all_reduces;
    return inner_.all_reduce(a...);
  }
  template <class... A>
  auto reduce_scatter(const A&... a) { return counted(inner_.reduce_scatter(a...)); }
  template <class... A>
  auto all_gather(const A&... a) { return counted(inner_.all_gather(a...)); }
  template <class... A>
  auto broadcast(const A&... a) { return counted(inner_.broadcast(a...)); }
  template <class... A>
  auto reduce(const A&... a) { return counted(inner_.reduce(a...)); }
  template <class... A>
  auto send(const A&... a) { return counted(inner_.send(a...)); }
  template <class... A>
  auto recv(const A&... a) { return counted(inner_.recv(a...)); }
  auto group() { return inner_.group(); }
  auto stream() const
    requires requires(Communicator& c) { c.stream(); }
  {
    return inner_.stream();
  }
  int all_reduces = 0, other_calls = 0;

 private:
  template <class R>
  R counted(R&& request) {
    ++other_calls;
    return std::move(request);
  }
  Communicator& inner_;
};

// Random values in Space, the same on every rank.
template <class P, class E, class Space>
tensor<P, E, row_major, Space> random_tensor(const E& shape, std::uint32_t seed, double low = -1.0, double high = 1.0) {
  host_tensor<P, E> host(shape);
  fill_random(host, seed, low, high);
  tensor<P, E, row_major, Space> t(shape);
  copy(t, host);
  return t;
}
template <class Space>
tensor<std::int32_t, flat, row_major, Space> random_labels(index_t n, int classes, std::uint32_t seed) {
  host_tensor<std::int32_t, flat> host(flat{n});
  std::mt19937 rng(seed);
  for (index_t i = 0; i < n; ++i) host.data()[i] = std::int32_t(rng() % std::uint32_t(classes));
  tensor<std::int32_t, flat, row_major, Space> t(flat{n});
  copy(t, host);
  return t;
}

template <class V>
std::vector<double> host_values(const V& v) {
  const auto host = to_host(v);
  std::vector<double> out(std::size_t(host.size()));
  for (index_t i = 0; i < host.size(); ++i) out[std::size_t(i)] = to_double(host.data()[i]);
  return out;
}

// |got - want| <= tol * max(|want|, max|want| / 10), elementwise.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what,
                         int rank) {
  CHECK_MESSAGE(got.size() == want.size(), what, ": ", got.size(), " elements, expected ", want.size());
  if (got.size() != want.size()) return;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  index_t bad = 0, first = -1;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * std::max(std::fabs(want[i]), scale / 10))) {
      if (first < 0) first = index_t(i);
      ++bad;
    }
  CHECK_MESSAGE(bad == 0, "rank ", rank, ": ", what, ": ", bad, " of ", got.size(), " elements differ; first [", first,
                "]: ", first < 0 ? 0.0 : got[std::size_t(first)], " vs ", first < 0 ? 0.0 : want[std::size_t(first)]);
  CHECK_MESSAGE(scale > 0, what, " is all zeros: the check would be vacuous");
}

// ||got - want|| <= tol ||want|| (2-norms): for results where a few elements
// may legitimately move apart (AdamW divides a gradient that rounding leaves
// near zero by its own size).
inline void expect_close_in_norm(const std::vector<double>& got, const std::vector<double>& want, double tol,
                                 const std::string& what, int rank) {
  CHECK_MESSAGE(got.size() == want.size(), what, ": ", got.size(), " elements, expected ", want.size());
  if (got.size() != want.size()) return;
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    difference += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  CHECK_MESSAGE(std::sqrt(difference) <= tol * std::sqrt(norm), "rank ", rank, ": ", what, ": relative difference ",
                std::sqrt(difference / norm));
  CHECK_MESSAGE(norm > 0, what, " is all zeros: the check would be vacuous");
}

// The whole parameter from every rank's slice: gathered, then each slice put
// back along the axis where its shape is smaller than the whole's. A parameter
// that is not split must be the same on every rank.
template <class Communicator, class Element, class Space>
std::vector<double> gathered(Communicator& c, const nn::flat_view<Element, Space>& local,
                             const std::vector<index_t>& local_shape, const std::vector<index_t>& full_shape) {
  const index_t ranks = c.size();
  tensor<Element, flat, row_major, Space> all(flat{local.size() * ranks});
  c.all_gather(local, all).wait();
  const std::vector<double> pieces = host_values(all);
  int axis = -1;
  for (std::size_t a = 0; a < full_shape.size(); ++a)
    if (local_shape[a] != full_shape[a]) axis = int(a);
  if (axis < 0) {
    for (index_t r = 1; r < ranks; ++r)
      CHECK_MESSAGE(std::equal(pieces.begin(), pieces.begin() + local.size(), pieces.begin() + r * local.size()),
                    "a parameter that is not split differs between rank 0 and rank ", r);
    return {pieces.begin(), pieces.begin() + local.size()};
  }
  index_t inner = 1;
  for (std::size_t a = std::size_t(axis) + 1; a < local_shape.size(); ++a) inner *= local_shape[a];
  const index_t along = local_shape[std::size_t(axis)];
  std::vector<double> whole(pieces.size());
  for (index_t r = 0; r < ranks; ++r)
    for (index_t i = 0; i < local.size(); ++i) {
      const index_t outer = i / (along * inner), a = i / inner % along, within = i % inner;
      whole[std::size_t((outer * along * ranks + r * along + a) * inner + within)] = pieces[std::size_t(r * local.size() + i)];
    }
  return whole;
}

struct parameter_record {
  std::vector<index_t> shape;
  std::vector<double> values, gradients;
};
template <class Network>
std::map<std::string, parameter_record> parameters_of(const Network& net) {
  std::map<std::string, parameter_record> out;
  net.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto gradients) {
    out[slot.name] = {slot.shape, host_values(values), host_values(gradients)};
  });
  return out;
}
// Every parameter (and, when asked, its gradient) of the split network, gathered,
// against the unsplit network's (elementwise, or in norm).
template <class Communicator, class Split, class Whole>
void expect_same_parameters(Communicator& c, const Split& split, const Whole& whole, double tol, bool gradients,
                            const std::string& when, bool elementwise = true) {
  const auto reference = parameters_of(whole);
  int compared = 0;
  split.for_each_parameter([&](const nn::parameter_slot& slot, auto values, auto grads) {
    const parameter_record& want = reference.at(slot.name);
    const auto got = gathered(c, values, slot.shape, want.shape);
    if (elementwise) expect_close(got, want.values, tol, when + " " + slot.name, c.rank());
    else expect_close_in_norm(got, want.values, tol, when + " " + slot.name, c.rank());
    if (gradients)
      expect_close(gathered(c, grads, slot.shape, want.shape), want.gradients, tol,
                   when + " gradient of " + slot.name, c.rank());
    ++compared;
  });
  CHECK(compared == 8);
}

}  // namespace tensor_parallel_test
