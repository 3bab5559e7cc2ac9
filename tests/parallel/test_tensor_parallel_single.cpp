// Tensor parallelism over fusor::comm::single: the one-way split network runs
// the same checks as under MPI (no MPI needed), and dispatch_tensor_parallel
// picks the degree compiled for a size and refuses the others at start.
#include <fusor/comm/single.hpp>

#include "parallel/tensor_parallel_cases.hpp"

using namespace tensor_parallel_test;

TEST_CASE("[host] parallel::tensor_parallel over comm::single (one way)") {
  fusor::comm::single c;
  check_everything<1, fusor::host_space>(c, fusor::host_executor{});
}

TEST_CASE("parallel::dispatch_tensor_parallel") {
  const auto degree = [&]<int Ways>() { return Ways * 10; };
  CHECK(parallel::dispatch_tensor_parallel<1, 2, 4, 8>(4, degree) == 40);
  CHECK(parallel::dispatch_tensor_parallel<1, 2, 4, 8>(1, {512, 256}, degree) == 10);
  int called = 0;
  parallel::dispatch_tensor_parallel<2, 4>(2, [&]<int Ways>() { called = Ways; });
  CHECK(called == 2);

  expect_error<fusor::error>([&] { parallel::dispatch_tensor_parallel<1, 2, 4, 8>(3, degree); },
                             {"3 ranks", "built for tensor-parallel degrees 1, 2, 4, 8"});
  expect_error<fusor::error>([&] { parallel::dispatch_tensor_parallel<1, 2, 4, 8>(16, {512}, degree); },
                             {"16 ranks", "degrees 1, 2, 4, 8"});
  expect_error<fusor::error>([&] { parallel::dispatch_tensor_parallel<1, 2, 4, 8>(8, {512, 100}, degree); },
                             {"8 ranks cannot split a layer of width 100"});
  expect_error<fusor::error>([&] { parallel::dispatch_tensor_parallel<1, 2, 3>(3, {512}, degree); },
                             {"3 ranks cannot split a layer of width 512"});
}
