// Stream order (issue 12). stream_binding: memory made in one stream's order
// and used on another is ordered by events both ways — the user stream sees the
// home stream's writes, and the home stream's later work (its frees) waits for
// the user stream. copy(): a synchronous copy sees what a non-blocking stream
// wrote (what loss totals and reports rely on). Made visible by keeping one
// stream busy: without the ordering, the other stream's work would overtake it.
#include <cstdint>

#include <fusor/core/stream_binding.hpp>

#include "support/fusor_test.hpp"

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_stream_binding {

using namespace fusor_test;

FUSOR_TEST_CASE("stream_binding: the executor's stream is where the binding last saw use") {
  stream_binding<space> binding{};
  CHECK(binding.home() == stream_t{});
  binding.use_on(executor_stream(executor{}));
  CHECK(binding.last_user() == stream_t{});
}

#if defined(FUSOR_TEST_CUDA)
namespace {
// Keeps a stream busy for about `nanoseconds`.
__global__ void stall(std::uint64_t nanoseconds) {
  for (std::uint64_t waited = 0; waited < nanoseconds; waited += 1000) __nanosleep(1000);
}

using vector_extents = dextents<index_t, 1>;
constexpr index_t n = 1 << 16;

index_t count_not_equal(const space_tensor<float, vector_extents>& t, float expected) {
  const auto h = to_host(t);
  index_t wrong = 0;
  for (index_t i = 0; i < h.size(); ++i) wrong += h(i) != expected;
  return wrong;
}
}  // namespace

FUSOR_TEST_CASE("stream_binding: work on a user stream waits for the home stream's writes") {
  created_stream home, user;
  space_tensor<float, vector_extents> memory(n), seen(n);
  poison(memory);  // synchronous: the device is idle after it
  stall<<<1, 1, 0, home.stream>>>(50'000'000);  // 50 ms
  FUSOR_CUDA_CHECK(cudaGetLastError());
  FUSOR_CUDA_CHECK(cudaMemsetAsync(memory.data(), 0, std::size_t(n) * sizeof(float), home.stream));
  stream_binding<device_space> binding(home.stream);
  binding.use_on(user.stream);
  CHECK(binding.last_user() == user.stream);
  assign(seen, memory + 1.0f, cuda_executor{user.stream});
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(count_not_equal(seen, 1.0f) == 0);  // the zeros, not the poison
}

FUSOR_TEST_CASE("stream_binding: the home stream's later work waits for the last user stream") {
  created_stream home, user;
  space_tensor<float, vector_extents> memory(n);
  poison(memory);
  {
    stream_binding<device_space> binding(home.stream);
    binding.use_on(user.stream);
    stall<<<1, 1, 0, user.stream>>>(50'000'000);
    FUSOR_CUDA_CHECK(cudaGetLastError());
    assign(memory, 7.0f, cuda_executor{user.stream});
  }  // the binding ends: the home stream waits for the user's assignment
  // What the home stream does next (the frees, in a network) comes after it.
  FUSOR_CUDA_CHECK(cudaMemsetAsync(memory.data(), 0, std::size_t(n) * sizeof(float), home.stream));
  FUSOR_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(count_not_equal(memory, 0.0f) == 0);  // not 7: the user's write came first
}

FUSOR_TEST_CASE("copy(): a synchronous copy waits for the work of a non-blocking stream") {
  created_stream busy;
  space_tensor<float, vector_extents> memory(n);
  poison(memory);
  stall<<<1, 1, 0, busy.stream>>>(50'000'000);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  assign(memory, 5.0f, cuda_executor{busy.stream});
  host_tensor<float, vector_extents> seen(n);
  copy(seen, memory);  // no synchronisation by the caller
  index_t wrong = 0;
  for (index_t i = 0; i < n; ++i) wrong += seen(i) != 5.0f;
  CHECK(wrong == 0);
}
#endif

}  // namespace test_stream_binding
