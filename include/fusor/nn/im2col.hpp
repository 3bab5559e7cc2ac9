// fusor/nn/im2col.hpp — the data movement around conv2d's matrix products:
// unfolding NCHW images into one row per output position (im2row), folding
// such rows back into an image gradient (row2im, a sum), and moving between
// the products' [position, channel] matrices and NCHW activations.
//
// With R = batch * out_height * out_width rows and K = in_channels * kernel^2
// columns, columns[r, (c * kernel + i) * kernel + j] is the input pixel that
// kernel tap (i, j) of input channel c sees at output position r (zero in the
// padding): the convolution is then columns x weight^T ([R, K] x [K, out]),
// as im2col in PyTorch and Caffe, transposed so that every GEMM of forward and
// backward is one call over the whole batch (weight [out, in, k, k] is a
// row-major [out, K] matrix as it is).
//
// Host: loops over samples (OpenMP), each sample's writes in memory order.
// row2im on the host scatters a sample's rows in order; on the GPU it gathers,
// one thread per input pixel: both deterministic, no atomics (their sums run
// in different orders). The CUDA kernels are plain grid-stride loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "fusor/config.hpp"
#include "fusor/core/extents.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/exec/host.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::nn::detail {

struct conv_geometry {
  index_t in_channels, height, width, out_channels, kernel, stride, padding, out_height, out_width;
  FUSOR_HOST_DEVICE constexpr index_t positions() const { return out_height * out_width; }
  FUSOR_HOST_DEVICE constexpr index_t columns() const { return in_channels * kernel * kernel; }
  FUSOR_HOST_DEVICE constexpr index_t image_size() const { return in_channels * height * width; }
};

// The passes, as plain structs of pointers: the host loops and the CUDA kernels share them.
template <class Element>
struct im2row_pass {
  const Element* x;  // [batch, in, H, W]
  Element* columns;  // [batch * positions, columns]
  conv_geometry g;

  // All rows of sample n, in memory order.
  void sample(index_t n) const {
    const Element zero = convert<Element>(0.0f);
    const Element* image = x + n * g.image_size();
    Element* out = columns + n * g.positions() * g.columns();
    for (index_t oh = 0; oh < g.out_height; ++oh)
      for (index_t ow = 0; ow < g.out_width; ++ow)
        for (index_t c = 0; c < g.in_channels; ++c)
          for (index_t i = 0; i < g.kernel; ++i) {
            const index_t h = oh * g.stride - g.padding + i;
            const Element* source = image + (c * g.height + h) * g.width;
            const bool row_inside = h >= 0 && h < g.height;
            for (index_t j = 0; j < g.kernel; ++j) {
              const index_t w = ow * g.stride - g.padding + j;
              *out++ = row_inside && w >= 0 && w < g.width ? source[w] : zero;
            }
          }
  }
  // One element of columns (GPU).
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t r = e / g.columns(), k = e % g.columns();
    const index_t n = r / g.positions(), p = r % g.positions();
    const index_t c = k / (g.kernel * g.kernel), i = k / g.kernel % g.kernel, j = k % g.kernel;
    const index_t h = p / g.out_width * g.stride - g.padding + i, w = p % g.out_width * g.stride - g.padding + j;
    const bool inside = h >= 0 && h < g.height && w >= 0 && w < g.width;
    columns[e] = inside ? x[n * g.image_size() + (c * g.height + h) * g.width + w] : convert<Element>(0.0f);
  }
};

template <class Element, class Accumulator>
struct row2im_pass {
  const Element* columns;  // [batch * positions, columns]: the gradient of im2row's output
  Element* dx;             // [batch, in, H, W]
  conv_geometry g;
  Accumulator* scratch;    // host, bf16/fp16: one Accumulator image per thread
  index_t scratch_images;

  static constexpr bool in_place = std::is_same_v<Element, Accumulator>;
  // dx of sample n: its rows scattered in order into an Accumulator image
  // (dx itself when it stores Accumulator), then stored.
  void sample(index_t n, Accumulator* scratch_image) const {
    Accumulator* image = scratch_image;
    if constexpr (in_place) image = dx + n * g.image_size();
    std::fill_n(image, g.image_size(), Accumulator(0));
    const Element* in = columns + n * g.positions() * g.columns();
    for (index_t oh = 0; oh < g.out_height; ++oh)
      for (index_t ow = 0; ow < g.out_width; ++ow)
        for (index_t c = 0; c < g.in_channels; ++c)
          for (index_t i = 0; i < g.kernel; ++i, in += g.kernel) {
            const index_t h = oh * g.stride - g.padding + i;
            if (h < 0 || h >= g.height) continue;
            Accumulator* target = image + (c * g.height + h) * g.width;
            for (index_t j = 0; j < g.kernel; ++j) {
              const index_t w = ow * g.stride - g.padding + j;
              if (w >= 0 && w < g.width) target[w] += convert<Accumulator>(in[j]);
            }
          }
    if constexpr (!in_place)
      std::transform(image, image + g.image_size(), dx + n * g.image_size(),
                     [](Accumulator v) { return convert<Element>(v); });
  }
  // One pixel of dx (GPU): the sum over the taps that saw it.
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t n = e / g.image_size(), c = e / (g.height * g.width) % g.in_channels;
    const index_t h = e / g.width % g.height, w = e % g.width;
    Accumulator sum = 0;
    for (index_t i = 0; i < g.kernel; ++i) {
      const index_t hs = h + g.padding - i;  // = oh * stride where tap i of row oh sees h
      if (hs < 0 || hs % g.stride != 0 || hs / g.stride >= g.out_height) continue;
      for (index_t j = 0; j < g.kernel; ++j) {
        const index_t ws = w + g.padding - j;
        if (ws < 0 || ws % g.stride != 0 || ws / g.stride >= g.out_width) continue;
        const index_t r = n * g.positions() + hs / g.stride * g.out_width + ws / g.stride;
        sum += convert<Accumulator>(columns[r * g.columns() + (c * g.kernel + i) * g.kernel + j]);
      }
    }
    dx[e] = convert<Element>(sum);
  }
};

// y[n, o, p] = z[n * positions + p, o] + bias[o]: the product's rows to NCHW.
template <class Element, class Compute>
struct rows_to_nchw_pass {
  const Element* z;
  const Element* bias;
  Element* y;
  conv_geometry g;

  void sample(index_t n) const {
    constexpr index_t block = 64;  // positions per block: z's block stays in L1 while y is written in order
    const index_t positions = g.positions(), outs = g.out_channels;
    for (index_t p0 = 0; p0 < positions; p0 += block) {
      const index_t p1 = std::min(positions, p0 + block);
      for (index_t o = 0; o < outs; ++o) {
        const Compute b = convert<Compute>(bias[o]);
        const Element* source = z + (n * positions) * outs + o;
        Element* target = y + (n * outs + o) * positions;
        for (index_t p = p0; p < p1; ++p) target[p] = convert<Element>(convert<Compute>(source[p * outs]) + b);
      }
    }
  }
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t positions = g.positions(), outs = g.out_channels;
    const index_t n = e / (outs * positions), o = e / positions % outs, p = e % positions;
    y[e] = convert<Element>(convert<Compute>(z[(n * positions + p) * outs + o]) + convert<Compute>(bias[o]));
  }
};

// dz[n * positions + p, o] = dy[n, o, p], and on the host bias_gradient[o] = sum of dy[:, o, :].
template <class Element, class Accumulator>
struct nchw_to_rows_pass {
  const Element* dy;
  Element* dz;
  Element* bias_gradient;  // host only; the GPU's comes from the weight-gradient GEMM's epilogue
  conv_geometry g;
  index_t batch;

  // Channels [o0, o1) over the whole batch: each channel's sum runs in (n, p) order.
  void channels(index_t o0, index_t o1) const {
    constexpr index_t block = 64;
    const index_t positions = g.positions(), outs = g.out_channels;
    Accumulator sums[block] = {};
    for (index_t ob = o0; ob < o1; ob += block) {
      const index_t oe = std::min(o1, ob + block);
      std::fill_n(sums, block, Accumulator(0));
      for (index_t n = 0; n < batch; ++n)
        for (index_t p0 = 0; p0 < positions; p0 += block) {
          const index_t p1 = std::min(positions, p0 + block);
          for (index_t o = ob; o < oe; ++o) {
            const Element* source = dy + (n * outs + o) * positions;
            Element* target = dz + (n * positions) * outs + o;
            Accumulator s = 0;
            for (index_t p = p0; p < p1; ++p) {
              target[p * outs] = source[p];
              s += convert<Accumulator>(source[p]);
            }
            sums[o - ob] += s;
          }
        }
      for (index_t o = ob; o < oe; ++o) bias_gradient[o] = convert<Element>(sums[o - ob]);
    }
  }
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t positions = g.positions(), outs = g.out_channels;
    const index_t r = e / outs, o = e % outs, n = r / positions, p = r % positions;
    dz[e] = dy[(n * outs + o) * positions + p];
  }
};

// ---- host ------------------------------------------------------------------------------
template <class Element>
void im2row(const im2row_pass<Element>& pass, index_t batch, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(batch * pass.g.positions() * pass.g.columns());
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t n = 0; n < batch; ++n) pass.sample(n);
}

template <class Element, class Accumulator>
void row2im(const row2im_pass<Element, Accumulator>& pass, index_t batch, const host_executor& ex) {
  // Without in-place sums, at most one thread per scratch image (conv2d reserves them).
  int team = ex.thread_count(batch * pass.g.positions() * pass.g.columns());
  if (!pass.in_place) team = int(std::min<index_t>(team, pass.scratch_images));
#if FUSOR_HAS_OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
  {
    Accumulator* image = pass.in_place ? nullptr : pass.scratch + index_t(omp_get_thread_num()) * pass.g.image_size();
#pragma omp for schedule(static)
    for (index_t n = 0; n < batch; ++n) pass.sample(n, image);
  }
#else
  (void)team;
  for (index_t n = 0; n < batch; ++n) pass.sample(n, pass.scratch);
#endif
}

template <class Element, class Compute>
void rows_to_nchw(const rows_to_nchw_pass<Element, Compute>& pass, index_t batch, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(batch * pass.g.positions() * pass.g.out_channels);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t n = 0; n < batch; ++n) pass.sample(n);
}

template <class Element, class Accumulator>
void nchw_to_rows(const nchw_to_rows_pass<Element, Accumulator>& pass, const host_executor& ex) {
  const index_t outs = pass.g.out_channels;
  [[maybe_unused]] const int team =
      int(std::min<index_t>(ex.thread_count(pass.batch * pass.g.positions() * outs), outs));
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
  for (int t = 0; t < team; ++t) pass.channels(outs * t / team, outs * (t + 1) / team);
#else
  pass.channels(0, outs);
#endif
}

// ---- CUDA ------------------------------------------------------------------------------
#if FUSOR_HAS_CUDA
template <class Pass>
__global__ void conv_element_kernel(const Pass pass, index_t count) {
  for (index_t e = index_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += index_t(gridDim.x) * blockDim.x)
    pass.element(e);
}
template <class Pass>
void run_conv_elements(const Pass& pass, index_t count, const cuda_executor& ex) {
  cuda::require("nn::conv2d on the cuda executor");
  if (count == 0) return;
  constexpr int block = 256;
  const index_t grid = std::min<index_t>((count + block - 1) / block, index_t(cuda::multiprocessor_count()) * 16);
  conv_element_kernel<<<int(grid), block, 0, ex.stream>>>(pass, count);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  cuda::launch_counter().fetch_add(1);
}
template <class Element>
void im2row(const im2row_pass<Element>& pass, index_t batch, const cuda_executor& ex) {
  run_conv_elements(pass, batch * pass.g.positions() * pass.g.columns(), ex);
}
template <class Element, class Accumulator>
void row2im(const row2im_pass<Element, Accumulator>& pass, index_t batch, const cuda_executor& ex) {
  run_conv_elements(pass, batch * pass.g.image_size(), ex);
}
template <class Element, class Compute>
void rows_to_nchw(const rows_to_nchw_pass<Element, Compute>& pass, index_t batch, const cuda_executor& ex) {
  run_conv_elements(pass, batch * pass.g.positions() * pass.g.out_channels, ex);
}
template <class Element, class Accumulator>
void nchw_to_rows(const nchw_to_rows_pass<Element, Accumulator>& pass, const cuda_executor& ex) {
  run_conv_elements(pass, pass.batch * pass.g.positions() * pass.g.out_channels, ex);
}
#endif

}  // namespace fusor::nn::detail
