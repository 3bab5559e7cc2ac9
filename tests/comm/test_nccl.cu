// fusor::comm::nccl over one GPU (a communicator of one rank made over
// fusor::comm::single): every collective on device memory in fp32, bf16 and
// fp16 leaves the values of one rank as they are, in place and out of place;
// send/recv to itself inside a group; shape errors. Requests made inside a
// group are done only once the outermost group has ended (wait() earlier is an
// error); a peer that never comes times out, aborts and is named; an NCCL error
// is named; finalize(); the device chosen. Linked with tests/cuda_main.cu:
// without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>

#include "support/fusor_test.hpp"

#include <chrono>
#include <cstdlib>
#include <optional>
#include <vector>

using namespace fusor_test;
using fusor::comm::reduction_op;
using flat_extents = dextents<index_t, 1>;
using fusor::comm::nccl_error;
using fusor::comm::seconds_d;

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

TEST_CASE("comm::nccl: a request made inside a group is done only after the outermost group has ended") {
  cudaStream_t stream, reader;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream, {.quiet = true});
    const index_t n = index_t{1} << 26;  // 256 MiB: a copy long enough that reading it early shows
    host_tensor<fp32, flat_extents> x{flat_extents(n)};
    fill_random(x, 21);
    const auto send = to_space(x);
    space_tensor<fp32, flat_extents> recv{flat_extents(n)};
    poison(recv);
    // The stream is idle, so an event recorded before NCCL queues the calls would be done at once.
    FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
    std::optional<fusor::comm::nccl_request> sent, received;
    {
      auto outer = c.group();
      {
        auto inner = c.group();
        (void)sent.emplace(c.send(send, 0, 0));
        (void)received.emplace(c.recv(recv, 0, 0));
      }
      // Inside the outer group NCCL has queued nothing: not done, and waiting would wait for itself.
      CHECK_FALSE(received->test());
      expect_error<nccl_error>([&] { received->wait(); },
                               {"ncclRecv (67108864 x float32) on rank 0, peer 0", "inside the group()"});
    }
    received->wait();
    sent->wait();
    // Read on another non-blocking stream, which only wait() orders after the receive.
    std::vector<float> got(static_cast<std::size_t>(n));
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(got.data(), recv.data(), got.size() * sizeof(float), cudaMemcpyDeviceToHost, reader));
    FUSOR_CUDA_CHECK(cudaStreamSynchronize(reader));
    index_t bad = 0;
    for (index_t i = 0; i < n; ++i) bad += got[std::size_t(i)] != x.data()[i];
    CHECK_MESSAGE(bad == 0, bad, " of ", n, " received elements were read before the receive had written them");
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(reader));
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("comm::nccl: a peer that never comes times out, aborts and is named") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclUniqueId id{};
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  // Rank 0 of 2; rank 1 never starts, so the communicator's start waits for it.
  const auto start = std::chrono::steady_clock::now();
  expect_error<nccl_error>(
      [&] { fusor::comm::nccl c(id, 0, 2, 0, stream, {.timeout = seconds_d(2.0), .quiet = true}); },
      {"ncclCommInitRankConfig (2 ranks) on rank 0, all ranks", "not complete after waiting 2.", "the timeout is 2.0 s",
       "aborted (ncclCommAbort)"});
  const seconds_d waited = std::chrono::steady_clock::now() - start;
  CHECK(waited.count() >= 2.0);
  CHECK(waited.count() < 60.0);
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("comm::nccl: an error NCCL reports is named with the call, its size, the rank and the peer") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream, {.timeout = seconds_d(30.0), .quiet = true});
    space_tensor<fp32, flat_extents> buffer{flat_extents(16)};
    // A receive from itself with no matching send: NCCL refuses it (invalid usage),
    // at once or through ncclCommGetAsyncError.
    expect_error<nccl_error>([&] { c.recv(buffer, 0, 0).wait(); },
                             {"ncclRecv (16 x float32) on rank 0, peer 0", "invalid usage"});
    if (c.aborted())
      expect_error<nccl_error>([&] { (void)c.all_reduce(buffer, reduction_op::sum); },
                               {"ncclAllReduce #1 (16 x float32, sum) on rank 0, all ranks", "aborted earlier"});
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("comm::nccl: timeout from FUSOR_NCCL_TIMEOUT_S, the device chosen, finalize") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  ::setenv("FUSOR_NCCL_TIMEOUT_S", "5", 1);
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream, {.quiet = true});
    ::unsetenv("FUSOR_NCCL_TIMEOUT_S");
    CHECK(c.timeout() == seconds_d(5.0));
    int visible = 0, current = -1;
    FUSOR_CUDA_CHECK(cudaGetDeviceCount(&visible));
    FUSOR_CUDA_CHECK(cudaGetDevice(&current));
    CHECK(c.device() == fusor::comm::choose_device(0, visible));
    CHECK(current == c.device());

    host_tensor<fp32, flat_extents> x{flat_extents(1000)};
    fill_random(x, 31);
    auto inout = to_space(x);
    auto request = c.all_reduce(inout, reduction_op::sum);
    c.finalize();  // completes every call first
    CHECK(c.native() == nullptr);
    CHECK_FALSE(c.aborted());
    request.wait();
    check_equal(inout, x, "all_reduce, then finalize");
    expect_error<nccl_error>([&] { (void)c.all_reduce(inout, reduction_op::sum); },
                             {"ncclAllReduce #2 (1000 x float32, sum) on rank 0", "finalized"});
  }
  ::unsetenv("FUSOR_NCCL_TIMEOUT_S");
  auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream, {.quiet = true});
  CHECK(c.timeout() == fusor::comm::default_nccl_timeout);
  c.finalize();
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}
