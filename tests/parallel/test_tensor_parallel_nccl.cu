// Tensor parallelism on the GPU over fusor::comm::nccl (one rank made over
// comm::single): the same checks as the host's, in device memory, with the
// communicator on the executor's stream and on a stream of its own. And the
// order between the compute stream and the all-reduce a split layer asks for,
// seen through a communicator that records what each all-reduce read and
// changes its result slowly: whatever the two streams (the legacy default
// stream 0 included), the all-reduce reads what the compute stream wrote and
// the compute stream reads what the all-reduce wrote. Linked with
// tests/cuda_main.cu: without a GPU it is compiled only and reports skipped (77).
#include <fusor/comm/nccl.hpp>
#include <fusor/comm/single.hpp>

#include "parallel/tensor_parallel_cases.hpp"

#include <type_traits>
#include <vector>

namespace {

// About 0.1 s of clock cycles: far longer than any launch or host call in between.
constexpr long long slow_cycles = 200'000'000;

__global__ void spin_then_fill(float* data, fusor::index_t n, float value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (fusor::index_t i = threadIdx.x; i < n; i += blockDim.x) data[i] = value;
}
__global__ void spin_then_scale(float* data, fusor::index_t n, float factor, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (fusor::index_t i = threadIdx.x; i < n; i += blockDim.x) data[i] *= factor;
}

// comm::nccl, observed: each fp32 all-reduce first copies what it is given
// (on the communicator's stream, just before the collective) to `seen`, and
// after it slowly doubles the result.
class observed_nccl {
 public:
  observed_nccl(fusor::comm::nccl& inner, float* seen) : inner_(inner), seen_(seen) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  cudaStream_t stream() const { return inner_.stream(); }
  template <class V>
  auto all_reduce(const V& inout, fusor::comm::reduction_op op) {
    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(*inout.data())>, float>) {
      return inner_.all_reduce(inout, op);
    } else {
      FUSOR_CUDA_CHECK(cudaMemcpyAsync(seen_, inout.data(), std::size_t(inout.size()) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream()));
      auto request = inner_.all_reduce(inout, op);
      spin_then_scale<<<1, 128, 0, stream()>>>(inout.data(), inout.size(), 2.0f, slow_cycles);
      FUSOR_CUDA_CHECK(cudaGetLastError());
      return request;
    }
  }

 private:
  fusor::comm::nccl& inner_;
  float* seen_;
};

fusor::index_t count_unequal(const float* device, fusor::index_t n, float want) {
  std::vector<float> host(static_cast<std::size_t>(n));
  FUSOR_CUDA_CHECK(cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  fusor::index_t bad = 0;
  for (float x : host) bad += x != want;
  return bad;
}

// The compute stream writes the partial sums late (3), asks the shard group for
// their sum, then copies the result: the all-reduce must have read 3s, and the
// copy must see the all-reduce's (slowly doubled) result, 6s.
void check_ordering(cudaStream_t compute, cudaStream_t communication, const char* streams) {
  INFO("compute ", streams);
  auto c = fusor::comm::nccl::over(fusor::comm::single{}, communication, {.quiet = true});
  constexpr fusor::index_t n = 4096;
  constexpr std::size_t bytes = n * sizeof(float);
  float *data = nullptr, *seen = nullptr, *after = nullptr;
  FUSOR_CUDA_CHECK(cudaMalloc(&data, bytes));
  FUSOR_CUDA_CHECK(cudaMalloc(&seen, bytes));
  FUSOR_CUDA_CHECK(cudaMalloc(&after, bytes));
  for (float* p : {data, seen, after}) FUSOR_CUDA_CHECK(cudaMemset(p, 0xFF, bytes));  // NaN
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  {
    observed_nccl observed(c, seen);
    fusor::parallel::communicator_shard_group<observed_nccl, fusor::device_space> group(observed);
    spin_then_fill<<<1, 128, 0, compute>>>(data, n, 3.0f, slow_cycles);
    FUSOR_CUDA_CHECK(cudaGetLastError());
    group.all_reduce_sum(fusor::nn::flat_view<float, fusor::device_space>(data, n), compute);
    FUSOR_CUDA_CHECK(cudaMemcpyAsync(after, data, bytes, cudaMemcpyDeviceToDevice, compute));
    FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const fusor::index_t read_early = count_unequal(seen, n, 3.0f);
  const fusor::index_t result_early = count_unequal(after, n, 6.0f);
  CHECK_MESSAGE(read_early == 0, read_early, " of ", n,
                " elements were read by the all-reduce before the compute stream wrote them");
  CHECK_MESSAGE(result_early == 0, result_early, " of ", n,
                " elements were read on the compute stream before the all-reduce had finished");
  for (float* p : {data, seen, after}) FUSOR_CUDA_CHECK(cudaFree(p));
}

}  // namespace

TEST_CASE("[cuda] parallel::tensor_parallel over comm::nccl (one GPU, one way)") {
  cudaStream_t stream;
  FUSOR_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, stream, {.quiet = true});
    tensor_parallel_test::check_everything<1, fusor::device_space>(c, fusor::cuda_executor{stream});
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("[cuda] parallel::tensor_parallel over comm::nccl on a stream other than the executor's") {
  cudaStream_t communication, compute;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&communication, cudaStreamNonBlocking));
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  {
    auto c = fusor::comm::nccl::over(fusor::comm::single{}, communication, {.quiet = true});
    tensor_parallel_test::check_everything<1, fusor::device_space>(c, fusor::cuda_executor{compute});
  }
  FUSOR_CUDA_CHECK(cudaStreamDestroy(compute));
  FUSOR_CUDA_CHECK(cudaStreamDestroy(communication));
}

TEST_CASE("[cuda] parallel::communicator_shard_group: the all-reduce is ordered after the compute and before its next") {
  cudaStream_t communication, other;
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&communication, cudaStreamNonBlocking));
  FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  check_ordering(nullptr, communication, "on the legacy default stream 0, the communicator on a non-blocking stream");
  check_ordering(other, communication, "on another non-blocking stream than the communicator's");
  check_ordering(communication, communication, "on the communicator's stream");
  FUSOR_CUDA_CHECK(cudaStreamDestroy(other));
  FUSOR_CUDA_CHECK(cudaStreamDestroy(communication));
}
