// tests/comm/collective_checks.hpp — checks of every collective, written once for any
// communicator (single in the host suite, mpi under mpirun -np 2 and 4).
//
// Rank q's input is random with seed (base + q), so every rank can build every
// other rank's input and the double-precision reference. Outputs are poisoned
// with NaN first. Each check runs the same calls on every rank, in the same order.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <fusor/comm/communicator.hpp>

#include "support/fusor_test.hpp"

namespace comm_test {

using namespace fusor_test;
using fusor::comm::reduction_op;
using flat_extents = dextents<index_t, 1>;
template <class P>
using flat = host_tensor<P, flat_extents>;

// Rank q's input of n elements for the check seeded with base.
template <class P>
flat<P> input(index_t n, std::uint32_t base, int q) {
  flat<P> t{flat_extents(n)};
  fill_random(t, base + static_cast<std::uint32_t>(q) * 7919u);
  return t;
}
template <class P>
flat<P> poisoned(index_t n) {
  flat<P> t{flat_extents(n)};
  poison(t);
  return t;
}

// op over ranks of element i of every rank's input, in double (of the stored values).
template <class P>
std::vector<double> reference(index_t n, std::uint32_t base, int ranks, reduction_op op) {
  std::vector<double> want(std::size_t(n), op == reduction_op::max ? -1e300 : 0.0);
  for (int q = 0; q < ranks; ++q) {
    const auto x = input<P>(n, base, q);
    for (index_t i = 0; i < n; ++i) {
      const double v = to_double(x.data()[i]);
      want[std::size_t(i)] = op == reduction_op::max ? std::max(want[std::size_t(i)], v) : want[std::size_t(i)] + v;
    }
  }
  if (op == reduction_op::avg)
    for (double& w : want) w /= ranks;
  return want;
}

// A reduction rounds once per rank in 16 bits; max is exact.
template <class P>
double reduction_tolerance(int ranks, reduction_op op) {
  return op == reduction_op::max ? 0.0 : tolerance<P>() * 2 * ranks;
}

template <class P, class T>
void expect_close(const T& got, const std::vector<double>& want, index_t offset, double tol, const std::string& what) {
  index_t bad = 0;
  for (index_t i = 0; i < got.size(); ++i)
    if (!close(to_double(got.data()[i]), want[std::size_t(offset + i)], tol)) {
      if (bad++ < 3) FAIL_CHECK(what, ": element ", i, " is ", to_double(got.data()[i]), ", want ", want[std::size_t(offset + i)]);
    }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", got.size(), " elements wrong");
}

template <class P, class C>
void check_all_reduce(C& c, index_t n, reduction_op op, bool in_place, std::uint32_t base) {
  const std::string what = "all_reduce " + std::string(fusor::comm::name(op)) + " n=" + std::to_string(n) +
                           (in_place ? " in place" : "");
  auto x = input<P>(n, base, c.rank());
  if (in_place) {
    c.all_reduce(x, op).wait();
    expect_close<P>(x, reference<P>(n, base, c.size(), op), 0, reduction_tolerance<P>(c.size(), op), what);
  } else {
    auto y = poisoned<P>(n);
    c.all_reduce(x, y, op).wait();
    expect_close<P>(y, reference<P>(n, base, c.size(), op), 0, reduction_tolerance<P>(c.size(), op), what);
  }
}

template <class P, class C>
void check_reduce_scatter(C& c, index_t chunk, reduction_op op, bool in_place, std::uint32_t base) {
  const std::string what = "reduce_scatter " + std::string(fusor::comm::name(op)) + " chunk=" + std::to_string(chunk) +
                           (in_place ? " in place" : "");
  auto x = input<P>(chunk * c.size(), base, c.rank());
  const auto want = reference<P>(chunk * c.size(), base, c.size(), op);
  if (in_place) {
    c.reduce_scatter(x, op).wait();
    const flat<P> mine{flat_extents(chunk)};
    std::copy(x.data() + chunk * c.rank(), x.data() + chunk * (c.rank() + 1), mine.data());
    expect_close<P>(mine, want, chunk * c.rank(), reduction_tolerance<P>(c.size(), op), what);
  } else {
    auto y = poisoned<P>(chunk);
    auto request = c.reduce_scatter(x, y, op);
    request.wait();
    expect_close<P>(y, want, chunk * c.rank(), reduction_tolerance<P>(c.size(), op), what);
  }
}

// Every rank's input laid end to end, in rank order.
template <class P>
std::vector<double> gathered(index_t chunk, std::uint32_t base, int ranks) {
  std::vector<double> want;
  for (int q = 0; q < ranks; ++q) {
    const auto x = input<P>(chunk, base, q);
    for (index_t i = 0; i < chunk; ++i) want.push_back(to_double(x.data()[i]));
  }
  return want;
}

template <class P, class C>
void check_all_gather(C& c, index_t chunk, bool in_place, std::uint32_t base) {
  const auto x = input<P>(chunk, base, c.rank());
  auto y = poisoned<P>(chunk * c.size());
  if (in_place) {
    std::copy(x.data(), x.data() + chunk, y.data() + chunk * c.rank());
    c.all_gather(y).wait();
  } else {
    c.all_gather(x, y).wait();
  }
  expect_close<P>(y, gathered<P>(chunk, base, c.size()), 0, 0.0,
                  "all_gather chunk=" + std::to_string(chunk) + (in_place ? " in place" : ""));
}

template <class P, class C>
void check_broadcast(C& c, index_t n, int root, std::uint32_t base) {
  auto x = c.rank() == root ? input<P>(n, base, root) : poisoned<P>(n);
  c.broadcast(x, root).wait();
  expect_close<P>(x, gathered<P>(n, base, root + 1), n * root, 0.0, "broadcast from " + std::to_string(root));
}

template <class P, class C>
void check_reduce(C& c, index_t n, reduction_op op, int root, std::uint32_t base) {
  const auto x = input<P>(n, base, c.rank());
  auto y = poisoned<P>(n);
  c.reduce(x, y, op, root).wait();
  if (c.rank() == root)
    expect_close<P>(y, reference<P>(n, base, c.size(), op), 0, reduction_tolerance<P>(c.size(), op),
                    "reduce to " + std::to_string(root));
}

// Every check above, for one element type, over odd and even sizes.
template <class P, class C>
void check_collectives(C& c) {
  std::uint32_t base = 100;
  for (index_t n : {index_t{1}, index_t{7}, index_t{1000}, index_t{4099}})
    for (reduction_op op : {reduction_op::sum, reduction_op::avg, reduction_op::max})
      for (bool in_place : {false, true}) check_all_reduce<P>(c, n, op, in_place, ++base);
  for (index_t chunk : {index_t{1}, index_t{5}, index_t{333}})
    for (reduction_op op : {reduction_op::sum, reduction_op::avg, reduction_op::max})
      for (bool in_place : {false, true}) check_reduce_scatter<P>(c, chunk, op, in_place, ++base);
  for (index_t chunk : {index_t{1}, index_t{3}, index_t{517}})
    for (bool in_place : {false, true}) check_all_gather<P>(c, chunk, in_place, ++base);
  for (int root = 0; root < c.size(); ++root) {
    check_broadcast<P>(c, 257, root, ++base);
    check_reduce<P>(c, 129, reduction_op::sum, root, ++base);
    check_reduce<P>(c, 3, reduction_op::avg, root, ++base);
  }
}

// Mismatched sizes name both.
template <class C>
void check_shape_errors(C& c) {
  auto x = input<fp32>(10 * c.size() + 1, 7, c.rank());
  auto y = poisoned<fp32>(10);
  expect_error<fusor::shape_error>([&] { c.reduce_scatter(x, y, reduction_op::sum).wait(); },
                                   {"reduce_scatter", std::to_string(10 * c.size() + 1).c_str(), "10"});
  expect_error<fusor::shape_error>([&] { c.all_reduce(x, y, reduction_op::sum).wait(); }, {"all_reduce", "10"});
  expect_error<fusor::error>([&] { c.broadcast(y, c.size()).wait(); }, {"broadcast", "root"});
}

}  // namespace comm_test
