// tests/kernels/row_kernels_emulated.hpp — the row-wise CUDA kernels' bodies
// (softmax_cuda.hpp, ...) run on the host by the SIMT emulator
// (simt_emulator.hpp), launched as launch_rows launches them on a GPU without
// clusters: the group and launch shape with_row_group chooses, a row too long
// for one block's registers going to 512-thread blocks that read it twice.
// Host builds only.
#pragma once

#include <fusor/config.hpp>

#if !FUSOR_HAS_CUDA
#include <fusor/kernels/row_reduce.hpp>
#include <fusor/kernels/simt_emulator.hpp>
#include <fusor/kernels/softmax_cuda.hpp>

namespace rowwise_test::emulated {

namespace fd = fusor::detail;
using fusor::index_t;

// body() in every thread of the grid `shape` takes over `rows` rows.
template <class Body>
void launch_rows(fd::row_launch shape, index_t rows, const Body& body) {
  if (shape.cluster_blocks > 1) shape = fd::block_row_launch;  // clusters are not emulated
  fd::emulate_kernel(fd::simt_grid{fd::row_grid(shape, rows), 1}, shape.block_threads, 0,
                     [&](unsigned char*) { body(); });
}

template <bool Log, class Y, class X>
void softmax(const fd::row_matrix<Y>& y, const fd::row_matrix<const X>& x) {
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<X, Y>, fd::cached_bytes<X>>(
      x.length, [&](auto group, fd::row_launch shape) {
        launch_rows(shape, x.rows, [&] { fd::softmax_rows<decltype(group), Log>(y, x); });
      });
}

template <bool Log, class DX, class Y, class DY>
void softmax_backward(const fd::row_matrix<DX>& dx, const fd::row_matrix<const Y>& y,
                      const fd::row_matrix<const DY>& dy) {
  fd::with_row_group<fd::emulated_simt, fd::vector_lanes<DX, Y, DY>, fd::cached_bytes<Y, DY>>(
      y.length, [&](auto group, fd::row_launch shape) {
        launch_rows(shape, y.rows, [&] { fd::softmax_backward_rows<decltype(group), Log>(dx, y, dy); });
      });
}

}  // namespace rowwise_test::emulated

#endif  // !FUSOR_HAS_CUDA
