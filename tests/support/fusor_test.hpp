// tests/support/fusor_test.hpp — what every fusor test body shares.
//
// A test body is written once against `fusor_test::executor` and
// `fusor_test::space`. The host test binary compiles it with the host executor;
// the CUDA test binary (the same source, compiled by nvcc with FUSOR_TEST_CUDA)
// with the cuda executor and device memory; the core's emulated binary (with
// FUSOR_TEST_EMULATED) with the cuda executor's kernels under the SIMT
// emulator, on host memory (support/emulated_executor.hpp). Inputs are random with fixed seeds,
// outputs are poisoned with NaN before each assignment so an unwritten element
// shows, and results are compared against double-precision references.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// The core, expressions, executors and library-free kernels: what every test
// body uses (not fusor/fusor.hpp, which includes every header: each test adds
// the focused ones it needs, and compiles in a third of the time).
#include <fusor/config.hpp>
#include <fusor/core/buffer.hpp>
#include <fusor/core/copy.hpp>
#include <fusor/core/cuda_runtime.hpp>
#include <fusor/core/error.hpp>
#include <fusor/core/extents.hpp>
#include <fusor/core/layout.hpp>
#include <fusor/core/memory.hpp>
#include <fusor/core/precision.hpp>
#include <fusor/core/strided_views.hpp>
#include <fusor/core/tensor.hpp>
#include <fusor/core/view.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/exec/cuda.hpp>
#include <fusor/exec/host.hpp>
#include <fusor/expr/derivative.hpp>
#include <fusor/expr/node.hpp>
#include <fusor/expr/operators.hpp>
#include <fusor/expr/substitute.hpp>
#include <fusor/kernels/attention.hpp>
#include <fusor/kernels/cross_entropy.hpp>
#include <fusor/kernels/layernorm.hpp>
#include <fusor/kernels/reduce.hpp>
#include <fusor/kernels/softmax.hpp>

#if defined(FUSOR_TEST_EMULATED)
#include "support/emulated_executor.hpp"
#endif

namespace fusor_test {

using namespace fusor;

#if defined(FUSOR_TEST_CUDA)
using executor = fusor::cuda_executor;
using space = fusor::device_space;
#define FUSOR_TEST_EXECUTOR_NAME "cuda"
#elif defined(FUSOR_TEST_EMULATED)
using executor = emulated_gpu_executor;  // the CUDA executor's kernels under the SIMT emulator, on host memory
using space = fusor::host_space;
#define FUSOR_TEST_EXECUTOR_NAME "emulated"
#else
using executor = fusor::host_executor;
using space = fusor::host_space;
#define FUSOR_TEST_EXECUTOR_NAME "host"
#endif

template <class P, class E, class L = row_major>
using host_tensor = tensor<P, E, L, host_space>;
template <class P, class E, class L = row_major>
using space_tensor = tensor<P, E, L, space>;

// Waits for the executor's work (the host executor is synchronous already).
inline void finish([[maybe_unused]] const executor& ex) {
#if defined(FUSOR_TEST_CUDA)
  ex.synchronize();
#endif
}

#if defined(FUSOR_TEST_CUDA)
// A non-blocking stream of the test's own, destroyed at the end of its scope
// (the runtime finishes work still queued on it).
struct created_stream {
  cudaStream_t stream{};
  created_stream() { FUSOR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  created_stream(const created_stream&) = delete;
  created_stream& operator=(const created_stream&) = delete;
  ~created_stream() { (void)cudaStreamDestroy(stream); }
};
#endif

// A copy of a host tensor in the tested space.
template <class P, class E, class L>
space_tensor<P, E, L> to_space(const host_tensor<P, E, L>& h) {
  space_tensor<P, E, L> t(h.extents());
  copy(t, h);
  return t;
}
// A host copy of a view or tensor in any space (same layout, gap-free).
template <class V>
auto to_host(const V& v) {
  const auto& view = as_view(v);
  using view_t = std::remove_cvref_t<decltype(view)>;
  host_tensor<typename view_t::precision, typename view_t::extents_type, typename view_t::layout_type> h(view.extents());
  copy(h, view);
  return h;
}

// Uniform values in [low, high), fixed by the seed.
template <class V>
void fill_random(const V& v, std::uint32_t seed, double low = -2.0, double high = 2.0) {
  const auto& view = as_view(v);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  auto* data = view.data();
  using element = std::remove_cvref_t<decltype(*data)>;
  for (index_t i = 0; i < view.mapping().required_span_size(); ++i) data[i] = convert<element>(dist(rng));
}

// NaN everywhere, so an element the assignment forgot to write fails the check.
template <class V>
void poison(const V& v) {
  const auto& view = as_view(v);
  using view_t = std::remove_cvref_t<decltype(view)>;
  using element = typename view_t::element_type;
  host_tensor<typename view_t::precision, typename view_t::extents_type, typename view_t::layout_type> nan(view.extents());
  for (index_t i = 0; i < nan.size(); ++i) nan.data()[i] = convert<element>(std::nan(""));
  copy(view, nan);
}

template <class T>
double to_double(const T& x) {
  return convert<double>(x);
}

// Relative tolerance of one elementwise result stored in precision P.
template <class P>
constexpr double tolerance() {
  using S = storage_t<P>;
  if constexpr (std::is_same_v<S, bfloat16>) return 1.6e-2;  // 8 significant bits, one rounding on store
  else if constexpr (std::is_same_v<S, float16>) return 2e-3;
  else if constexpr (std::is_same_v<S, float>) return 2e-6;
  else return 1e-12;
}

// |got - want| <= tol * max(1, |want|), with NaN matching NaN only when asked.
inline bool close(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// The elements of a view or tensor in any space, as doubles, in the order its
// host copy stores them (row-major for a row-major view).
template <class V>
std::vector<double> as_doubles(const V& v) {
  const auto h = to_host(v);
  std::vector<double> out(static_cast<std::size_t>(h.size()));
  for (index_t i = 0; i < h.size(); ++i) out[std::size_t(i)] = to_double(h.data()[i]);
  return out;
}

// got against want elementwise (close()); names the first five misses.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                        const std::string& what) {
  REQUIRE(got.size() == want.size());
  int misses = 0;
  for (std::size_t i = 0; i < got.size() && misses < 5; ++i)
    if (!close(got[i], want[i], tol)) {
      ++misses;
      FAIL_CHECK(what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (tolerance " << tol << ")");
    }
}

// Checks that `action` throws Error and that its message names every one of `parts`.
template <class Error, class Action>
void expect_error(Action&& action, std::initializer_list<const char*> parts) {
  try {
    action();
    FAIL_CHECK("no exception was thrown");
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* part : parts) {
      INFO("message: ", message);
      CHECK_MESSAGE(message.find(part) != std::string::npos, "expected to find: ", part);
    }
  }
}

}  // namespace fusor_test

// A test case that runs under the tested executor; its name says which.
#define FUSOR_TEST_CASE(name) TEST_CASE("[" FUSOR_TEST_EXECUTOR_NAME "] " name)
