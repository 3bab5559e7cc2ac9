// fusor::comm::nccl over one GPU (a communicator of one rank made over
// fusor::comm::single): every collective on device memory in fp32, bf16 and
// fp16 leaves the values of one rank as they are, in place and out of place;
// send/recv to itself inside a group; shape errors. Linked with tests/cuda_main.cu:
// without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>

#include "support/fusor_test.hpp"

using namespace fusor_test;
using fusor::comm::reduction_op;
using flat_extents = dextents<index_t, 1>;

namespace {

template <class P>
void check_equal(const space_tensor<P, flat_extents>& got, const host_tensor<P, flat_extents>& want, const char* what) {
  const auto host = to_host(got);
  index_t bad = 0;
  for (index_t i = 0; i < want.size(); ++i) bad += !close(to_double(host.data()[i]), to_double(want.data()[i]), 0.0);
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", want.size(), " elements differ from the one rank's input");
}

template <class P>
void check_one_rank(fusor::comm::nccl& c, index_t n, std::uint32_t seed) {
  host_tensor<P, flat_extents> x{flat_extents(n)};
  fill_random(x, seed);
  const auto send = to_space(x);
  space_tensor<P, flat_extents> recv{flat_extents(n)};
  for (reduction_op op : {reduction_op::sum, reduction_op::avg, reduction_op::max}) {
    poison(recv);
    c.all_reduce(send, recv, op).wait();
    check_equal(recv, x, "all_reduce");
    poison(recv);
    c.reduce_scatter(send, recv, op).wait();
    check_equal(recv, x, "reduce_scatter");
    poison(recv);
    c.reduce(send, recv, op, 0).wait();
    check_equal(recv, x, "reduce");
    auto inout = to_space(x);
    c.all_reduce(inout, op).wait();
    check_equal(inout, x, "all_reduce in place");
    c.reduce_scatter(inout, op).wait();
    check_equal(inout, x, "reduce_scatter in place");
  }
  poison(recv);
  c.all_gather(send, recv).wait();
  check_equal(recv, x, "all_gather");
  auto inout = to_space(x);
  c.all_gather(inout).wait();
  c.broadcast(inout, 0).wait();
  check_equal(inout, x, "all_gather in place, then broadcast");
  poison(recv);
  {
    auto group = c.group();
    (void)c.send(send, 0, 0);
    (void)c.recv(recv, 0, 0);
  }
  FUSOR_CUDA_CHECK(cudaStreamSynchronize(c.stream()));
  check_equal(recv, x, "send and recv to itself");
}

}  // namespace

TEST_CASE("comm::nccl: one GPU, every collective") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream);
    CHECK(c.rank() == 0);
    CHECK(c.size() == 1);
    for (index_t n : {index_t{1}, index_t{7}, index_t{4099}}) {
      check_one_rank<fp32>(c, n, 11);
      check_one_rank<bf16>(c, n, 12);
      check_one_rank<fp16>(c, n, 13);
    }
    space_tensor<fp32, flat_extents> a{flat_extents(10)}, b{flat_extents(3)};
    expect_error<fusor::shape_error>([&] { c.reduce_scatter(a, b, reduction_op::sum).wait(); },
                                     {"reduce_scatter", "10", "3"});
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}
