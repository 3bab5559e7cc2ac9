// fusor::comm::single: every collective over one rank against the same references
// as the MPI tests, in fp32, bf16 and fp16; shape errors; no peer for send/recv.
#include <fusor/comm/single.hpp>

#include "comm/collective_checks.hpp"

using namespace comm_test;

TEST_CASE("comm::single: rank 0 of 1") {
  fusor::comm::single c;
  static_assert(fusor::comm::communicator<fusor::comm::single>);
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  CHECK(c.local_rank() == 0);
  auto r = c.all_reduce(input<fp32>(3, 1, 0), reduction_op::sum);
  CHECK(r.test());
  [[maybe_unused]] fusor::comm::no_group group = c.group();
}

TEST_CASE("comm::single: collectives") {
  fusor::comm::single c;
  SUBCASE("fp32") { check_collectives<fp32>(c); }
  SUBCASE("bf16") { check_collectives<bf16>(c); }
  SUBCASE("fp16") { check_collectives<fp16>(c); }
}

TEST_CASE("comm::single: errors") {
  fusor::comm::single c;
  check_shape_errors(c);
  auto x = input<fp32>(4, 1, 0);
  expect_error<fusor::error>([&] { c.send(x, 0, 0); }, {"send", "peer"});
  expect_error<fusor::error>([&] { c.recv(x, 0, 0); }, {"recv", "peer"});
}
