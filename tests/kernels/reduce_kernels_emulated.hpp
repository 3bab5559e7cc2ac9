// tests/kernels/reduce_kernels_emulated.hpp — the CUDA reductions' kernel
// bodies (reduce_kernels.hpp) run on the host by the SIMT emulator
// (simt_emulator.hpp), planned and launched as reduce_cuda.hpp launches them,
// on an emulated GPU of `multiprocessors` SMs holding `blocks_per_sm` blocks
// each, with grids of at most `max_blocks` along an axis: small, so that a
// test's launches stay quick while still spreading a tensor over several
// blocks, splitting long axes over pieces combined by a second kernel, and
// striding over more work than the grid (on a GPU: past 2^31 - 1 blocks).
// The three forms (into a one-element destination, as a value, along an
// axis) go through reduce.hpp's own dispatch. Host builds only.
#pragma once

#include <fusor/config.hpp>

#if !FUSOR_HAS_CUDA
#include <cstring>
#include <type_traits>
#include <vector>

#include <fusor/kernels/reduce.hpp>
#include <fusor/kernels/reduce_kernels.hpp>
#include <fusor/kernels/simt_emulator.hpp>

namespace reduce_test::emulated {

namespace fd = fusor::detail;
using fusor::index_t;
using fusor::reduction_kind;

inline constexpr index_t multiprocessors = 4;
inline constexpr index_t blocks_per_sm = 8;
inline constexpr index_t max_blocks = 16;  // along an axis: more work than blocks, so the grids stride

// Scratch for a first kernel's partial results, poisoned (0xff bytes: NaN
// values, index -1) so that a result no block wrote shows.
template <class T>
std::vector<T> poisoned_scratch(index_t count) {
  std::vector<T> v(std::size_t(count > 0 ? count : 1));
  std::memset(static_cast<void*>(v.data()), 0xff, v.size() * sizeof(T));
  return v;
}

template <class Red, class In, class Sink>
void reduce_whole(const Red& red, const In& in, const Sink& sink) {
  auto job = fd::plan_reduce_whole(red, in, sink, multiprocessors * blocks_per_sm);
  auto partial = poisoned_scratch<typename Red::accumulator>(job.blocks);
  if (job.blocks > 1) job.partial = partial.data();
  fd::emulate_kernel(fd::simt_grid{job.blocks, 1}, fd::reduction_block_threads, 0,
                     [&](unsigned char*) { fd::reduce_whole_part<fd::emulated_simt>(job); });
  if (job.blocks > 1)
    fd::emulate_kernel(fd::simt_grid{1, 1}, fd::reduction_block_threads, 0,
                       [&](unsigned char*) { fd::finish_whole<fd::emulated_simt>(job); });
}

template <class Red, class In, class Dst>
void reduce_axis(const Red& red, const In& in, const Dst& dst) {
  auto job = fd::plan_reduce_axis(red, in, dst, multiprocessors, max_blocks);
  auto pieces = poisoned_scratch<typename Red::accumulator>(in.outputs * job.splits);
  if (job.splits > 1) job.partial = pieces.data();
  fd::emulate_kernel(fd::simt_grid{job.grid_x, job.grid_y}, fd::reduction_block_threads, 0, [&](unsigned char*) {
    if (job.rows) fd::reduce_rows<fd::emulated_simt>(job);
    else fd::reduce_columns<fd::emulated_simt>(job);
  });
  if (job.splits > 1)
    fd::emulate_kernel(fd::simt_grid{job.finish_blocks, 1}, fd::reduction_block_threads, 0,
                       [&](unsigned char*) { fd::finish_pieces<fd::emulated_simt>(job); });
}

// An executor for reduce.hpp's dispatch (its checks of shapes and types,
// and its choice between the whole tensor and an axis) whose work runs above.
struct gpu {
  template <class Target>
  static constexpr bool can_run = fusor::target_readable_from_host_v<Target>;  // the emulator reads host memory
};
template <class Red, class In, class Sink>
void reduce_whole_on(const Red& red, const In& in, const Sink& sink, const gpu&) {
  reduce_whole(red, in, sink);
}
template <class Red, class In, class Dst>
void reduce_axis_on(const Red& red, const In& in, const Dst& dst, const gpu&) {
  reduce_axis(red, in, dst);
}
template <class Red, class In>
typename Red::result_type reduce_value_on(const Red& red, const In& in, const gpu&) {
  typename Red::result_type result{};
  reduce_whole(red, in, fd::value_sink<typename Red::result_type>{&result});
  return result;
}

// reduce.hpp's three forms.
template <reduction_kind Kind, class Out, class In>
void into(const Out& out, const In& x) {
  fd::reduce_whole<Kind>(fusor::as_expression(out), fusor::as_expression(x), gpu{});
}
template <reduction_kind Kind, class In>
auto value(const In& x) {
  return fd::reduce_value<Kind>(fusor::as_expression(x), gpu{});
}
template <reduction_kind Kind, class Out, class In>
void along(const Out& out, const In& x, int axis) {
  fd::reduce_axis<Kind>(fusor::as_expression(out), fusor::as_expression(x), axis, gpu{});
}

}  // namespace reduce_test::emulated
#endif  // !FUSOR_HAS_CUDA
