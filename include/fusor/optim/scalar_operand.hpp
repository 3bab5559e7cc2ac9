// fusor/optim/scalar_operand.hpp — one value in memory (a learning rate, a loss
// scale, a skip flag) as an operand of a fused expression, broadcast to every
// element, and the one-thread "task" that updates such values on the device.
//
// A rank-0 view broadcasts too, but a pass holding one is planned as strided
// (its rank differs from the destination's). scalar(v) is a leaf that any
// destination can read linearly: the optimizers' passes keep the vectorised
// path while reading their step's values from device memory, never from
// host arguments that would change from step to step (a captured CUDA graph
// replays its kernel arguments frozen).
#pragma once

#include <cstddef>
#include <type_traits>

#include <cuda/std/array>
#include <cuda/std/mdspan>

#include "fusor/config.hpp"
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/view.hpp"
#include "fusor/exec/cuda.hpp"
#include "fusor/exec/host.hpp"

namespace fusor::optim {

/// A read-only expression leaf: the value at `pointer`, the same for every element.
template <class T, class Space>
struct scalar_operand {
  /// The type the value is read as: T's compute type.
  using value_type = compute_t<T>;
  /// The type stored at `pointer`.
  using element_type = T;
  /// Rank-0 extents: the value broadcasts to any shape.
  using extents_type = ::cuda::std::extents<index_t>;
  /// The memory space `pointer` points into.
  using space = Space;
  /// 0: one value.
  static constexpr std::size_t rank = 0;
  /// False: unlike a literal scalar, its type counts in the expression's common type.
  static constexpr bool weak = false;
  static constexpr std::size_t narrowest_element = 16;  ///< never narrows the vector width

  /// Where the value is, in `Space`; read by every element.
  const T* pointer;

  /// Empty extents (rank 0).
  FUSOR_HOST_DEVICE extents_type extents() const { return {}; }
  /// The value, whatever the index.
  template <std::size_t R>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE value_type at(const ::cuda::std::array<index_t, R>&) const {
    return convert<value_type>(*pointer);
  }
  /// The value in all V lanes, whatever the position.
  template <int V, bool Aligned>
  FUSOR_HOST_DEVICE FUSOR_FORCE_INLINE lanes<value_type, V> load(index_t) const {
    const value_type v = convert<value_type>(*pointer);
    lanes<value_type, V> out;
    FUSOR_UNROLL
    for (int j = 0; j < V; ++j) out[j] = v;
    return out;
  }
  /// True: the value can be read at any destination's linear positions.
  template <std::size_t R>
  bool linear_with(const dense_shape<R>&) const { return true; }
  /// True: the value never limits vectorised access.
  bool aligned16() const { return true; }
};

/// scalar(v): the one element of rank-0 view v as a broadcast operand.
template <class P, class L, class Space>
scalar_operand<storage_t<P>, Space> scalar(const view<P, ::cuda::std::extents<index_t>, L, Space>& v) {
  return {v.data()};
}
/// The value at `pointer` (in `Space`) as a broadcast operand.
template <class T, class Space>
scalar_operand<T, Space> scalar(const T* pointer) {
  return {pointer};
}

// ---- one-thread tasks --------------------------------------------------------------
// The bookkeeping of a step (clip coefficient, loss scale, step count) is a few
// scalar operations: on the host it runs inline; under the cuda executor it is
// one single-thread kernel on the executor's stream, so nothing waits and a
// graph capture records it. A task is a trivially copyable function object
// with a FUSOR_HOST_DEVICE `void operator()() const`.
#if FUSOR_HAS_CUDA
namespace detail {
template <class Task>
__global__ void single_thread_task_kernel(const Task task) {
  task();
}
}  // namespace detail
#endif

/// Runs `task` now, on the calling thread.
template <class Task>
void run_task(const Task& task, const host_executor&) {
  task();
}
#if FUSOR_HAS_CUDA
/// Queues `task` as a one-thread kernel on the executor's stream (no wait; a graph capture records it).
template <class Task>
void run_task(const Task& task, const cuda_executor& executor) {
  static_assert(std::is_trivially_copyable_v<Task>, "fusor: a task travels to the GPU by value");
  gpu::require("the cuda executor");
  detail::single_thread_task_kernel<Task><<<1, 1, 0, executor.stream>>>(task);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
#endif

}  // namespace fusor::optim
