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

// The sizes of one convolution, as compile-time constants: the loops below
// divide by them and unroll over the kernel.
template <std::size_t InChannels, std::size_t Height, std::size_t Width, std::size_t OutChannels, std::size_t Kernel,
          std::size_t Stride, std::size_t Padding, std::size_t OutHeight, std::size_t OutWidth>
struct conv_geometry {
  static constexpr index_t in_channels = InChannels, height = Height, width = Width, out_channels = OutChannels,
                           kernel = Kernel, stride = Stride, padding = Padding, out_height = OutHeight,
                           out_width = OutWidth;
  static constexpr index_t positions = out_height * out_width;  // per sample
  static constexpr index_t columns = in_channels * kernel * kernel;
  static constexpr index_t image_size = in_channels * height * width;
  // Output columns [first_inner_column, last_inner_column) see no padding along w.
  static constexpr index_t first_inner_column = (padding + stride - 1) / stride;
  static constexpr index_t last_inner_column =
      width + padding >= kernel ? std::min<index_t>(out_width, (width + padding - kernel) / stride + 1) : 0;
};

// The passes, as plain structs of pointers: the host loops and the CUDA kernels share them.
template <class Element, class G>
struct im2row_pass {
  const Element* x;  // [batch, in, H, W]
  Element* columns;  // [batch * positions, columns]

  // All rows of sample n, in memory order.
  void sample(index_t n) const {
    const Element zero = convert<Element>(0.0f);
    const Element* image = x + n * G::image_size;
    Element* out = columns + n * G::positions * G::columns;
    for (index_t oh = 0; oh < G::out_height; ++oh)
      for (index_t ow = 0; ow < G::out_width; ++ow) {
        const index_t w0 = ow * G::stride - G::padding;
        const bool inner = ow >= G::first_inner_column && ow < G::last_inner_column;
        for (index_t c = 0; c < G::in_channels; ++c)
          for (index_t i = 0; i < G::kernel; ++i, out += G::kernel) {
            const index_t h = oh * G::stride - G::padding + i;
            const Element* source = image + (c * G::height + h) * G::width + w0;
            if (h < 0 || h >= G::height) {
              for (index_t j = 0; j < G::kernel; ++j) out[j] = zero;
            } else if (inner) {
              for (index_t j = 0; j < G::kernel; ++j) out[j] = source[j];
            } else {
              for (index_t j = 0; j < G::kernel; ++j) out[j] = w0 + j >= 0 && w0 + j < G::width ? source[j] : zero;
            }
          }
      }
  }
  // One element of columns (GPU).
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t r = e / G::columns, k = e % G::columns;
    const index_t n = r / G::positions, p = r % G::positions;
    const index_t c = k / (G::kernel * G::kernel), i = k / G::kernel % G::kernel, j = k % G::kernel;
    const index_t h = p / G::out_width * G::stride - G::padding + i, w = p % G::out_width * G::stride - G::padding + j;
    const bool inside = h >= 0 && h < G::height && w >= 0 && w < G::width;
    columns[e] = inside ? x[n * G::image_size + (c * G::height + h) * G::width + w] : convert<Element>(0.0f);
  }
};

template <class Element, class Accumulator, class G>
struct row2im_pass {
  const Element* columns;  // [batch * positions, columns]: the gradient of im2row's output
  Element* dx;             // [batch, in, H, W]
  Accumulator* scratch;    // host, bf16/fp16: one Accumulator image per thread
  index_t scratch_images;

  static constexpr bool in_place = std::is_same_v<Element, Accumulator>;
  // dx of sample n: its rows scattered in order into an Accumulator image
  // (dx itself when it stores Accumulator), then stored.
  void sample(index_t n, Accumulator* scratch_image) const {
    Accumulator* image = scratch_image;
    if constexpr (in_place) image = dx + n * G::image_size;
    std::fill_n(image, G::image_size, Accumulator(0));
    const Element* in = columns + n * G::positions * G::columns;
    for (index_t oh = 0; oh < G::out_height; ++oh)
      for (index_t ow = 0; ow < G::out_width; ++ow) {
        const index_t w0 = ow * G::stride - G::padding;
        const bool inner = ow >= G::first_inner_column && ow < G::last_inner_column;
        for (index_t c = 0; c < G::in_channels; ++c)
          for (index_t i = 0; i < G::kernel; ++i, in += G::kernel) {
            const index_t h = oh * G::stride - G::padding + i;
            if (h < 0 || h >= G::height) continue;
            Accumulator* target = image + (c * G::height + h) * G::width + w0;
            if (inner) {
              for (index_t j = 0; j < G::kernel; ++j) target[j] += convert<Accumulator>(in[j]);
            } else {
              for (index_t j = 0; j < G::kernel; ++j)
                if (w0 + j >= 0 && w0 + j < G::width) target[j] += convert<Accumulator>(in[j]);
            }
          }
      }
    if constexpr (!in_place)
      std::transform(image, image + G::image_size, dx + n * G::image_size,
                     [](Accumulator v) { return convert<Element>(v); });
  }
  // One pixel of dx (GPU): the sum over the taps that saw it.
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t n = e / G::image_size, c = e / (G::height * G::width) % G::in_channels;
    const index_t h = e / G::width % G::height, w = e % G::width;
    Accumulator sum = 0;
    for (index_t i = 0; i < G::kernel; ++i) {
      const index_t hs = h + G::padding - i;  // = oh * stride where tap i of row oh sees h
      if (hs < 0 || hs % G::stride != 0 || hs / G::stride >= G::out_height) continue;
      for (index_t j = 0; j < G::kernel; ++j) {
        const index_t ws = w + G::padding - j;
        if (ws < 0 || ws % G::stride != 0 || ws / G::stride >= G::out_width) continue;
        const index_t r = n * G::positions + hs / G::stride * G::out_width + ws / G::stride;
        sum += convert<Accumulator>(columns[r * G::columns + (c * G::kernel + i) * G::kernel + j]);
      }
    }
    dx[e] = convert<Element>(sum);
  }
};

// y[n, o, p] = z[n * positions + p, o] + bias[o]: the product's rows to NCHW.
template <class Element, class Compute, class G>
struct rows_to_nchw_pass {
  const Element* z;
  const Element* bias;
  Element* y;

  void sample(index_t n) const {
    constexpr index_t block = 64;  // positions per block: z's block stays in L1 while y is written in order
    for (index_t p0 = 0; p0 < G::positions; p0 += block) {
      const index_t p1 = std::min(G::positions, p0 + block);
      for (index_t o = 0; o < G::out_channels; ++o) {
        const Compute b = convert<Compute>(bias[o]);
        const Element* source = z + (n * G::positions) * G::out_channels + o;
        Element* target = y + (n * G::out_channels + o) * G::positions;
        for (index_t p = p0; p < p1; ++p)
          target[p] = convert<Element>(convert<Compute>(source[p * G::out_channels]) + b);
      }
    }
  }
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t n = e / (G::out_channels * G::positions), o = e / G::positions % G::out_channels,
                  p = e % G::positions;
    y[e] = convert<Element>(convert<Compute>(z[(n * G::positions + p) * G::out_channels + o]) + convert<Compute>(bias[o]));
  }
};

// dz[n * positions + p, o] = dy[n, o, p], and on the host bias_gradient[o] = sum of dy[:, o, :].
template <class Element, class Accumulator, class G>
struct nchw_to_rows_pass {
  const Element* dy;
  Element* dz;
  Element* bias_gradient;  // host only; the GPU's comes from the weight-gradient GEMM's epilogue
  index_t batch;

  // Channels [o0, o1) over the whole batch: each channel's sum runs in (n, p) order.
  void channels(index_t o0, index_t o1) const {
    constexpr index_t block = 64;
    Accumulator sums[block] = {};
    for (index_t ob = o0; ob < o1; ob += block) {
      const index_t oe = std::min(o1, ob + block);
      std::fill_n(sums, block, Accumulator(0));
      for (index_t n = 0; n < batch; ++n)
        for (index_t p0 = 0; p0 < G::positions; p0 += block) {
          const index_t p1 = std::min(G::positions, p0 + block);
          for (index_t o = ob; o < oe; ++o) {
            const Element* source = dy + (n * G::out_channels + o) * G::positions;
            Element* target = dz + (n * G::positions) * G::out_channels + o;
            Accumulator s = 0;
            for (index_t p = p0; p < p1; ++p) {
              target[p * G::out_channels] = source[p];
              s += convert<Accumulator>(source[p]);
            }
            sums[o - ob] += s;
          }
        }
      for (index_t o = ob; o < oe; ++o) bias_gradient[o] = convert<Element>(sums[o - ob]);
    }
  }
  FUSOR_HOST_DEVICE void element(index_t e) const {
    const index_t r = e / G::out_channels, o = e % G::out_channels, n = r / G::positions, p = r % G::positions;
    dz[e] = dy[(n * G::out_channels + o) * G::positions + p];
  }
};

// ---- host ------------------------------------------------------------------------------
template <class Element, class G>
void im2row(const im2row_pass<Element, G>& pass, index_t batch, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(batch * G::positions * G::columns);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t n = 0; n < batch; ++n) pass.sample(n);
}

template <class Element, class Accumulator, class G>
void row2im(const row2im_pass<Element, Accumulator, G>& pass, index_t batch, const host_executor& ex) {
  // Without in-place sums, at most one thread per scratch image (conv2d reserves them).
  int team = ex.thread_count(batch * G::positions * G::columns);
  if (!pass.in_place) team = int(std::min<index_t>(team, pass.scratch_images));
#if FUSOR_HAS_OPENMP
#pragma omp parallel num_threads(team) if (team > 1)
  {
    Accumulator* image = pass.in_place ? nullptr : pass.scratch + index_t(omp_get_thread_num()) * G::image_size;
#pragma omp for schedule(static)
    for (index_t n = 0; n < batch; ++n) pass.sample(n, image);
  }
#else
  (void)team;
  for (index_t n = 0; n < batch; ++n) pass.sample(n, pass.scratch);
#endif
}

template <class Element, class Compute, class G>
void rows_to_nchw(const rows_to_nchw_pass<Element, Compute, G>& pass, index_t batch, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(batch * G::positions * G::out_channels);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t n = 0; n < batch; ++n) pass.sample(n);
}

template <class Element, class Accumulator, class G>
void nchw_to_rows(const nchw_to_rows_pass<Element, Accumulator, G>& pass, const host_executor& ex) {
  const index_t outs = G::out_channels;
  [[maybe_unused]] const int team = int(std::min<index_t>(ex.thread_count(pass.batch * G::positions * outs), outs));
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
  gpu::require("nn::conv2d on the cuda executor");
  if (count == 0) return;
  constexpr int block = 256;
  const index_t grid = std::min<index_t>((count + block - 1) / block, index_t(gpu::multiprocessor_count()) * 16);
  conv_element_kernel<<<int(grid), block, 0, ex.stream>>>(pass, count);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
template <class Element, class G>
void im2row(const im2row_pass<Element, G>& pass, index_t batch, const cuda_executor& ex) {
  run_conv_elements(pass, batch * G::positions * G::columns, ex);
}
template <class Element, class Accumulator, class G>
void row2im(const row2im_pass<Element, Accumulator, G>& pass, index_t batch, const cuda_executor& ex) {
  run_conv_elements(pass, batch * G::image_size, ex);
}
template <class Element, class Compute, class G>
void rows_to_nchw(const rows_to_nchw_pass<Element, Compute, G>& pass, index_t batch, const cuda_executor& ex) {
  run_conv_elements(pass, batch * G::positions * G::out_channels, ex);
}
template <class Element, class Accumulator, class G>
void nchw_to_rows(const nchw_to_rows_pass<Element, Accumulator, G>& pass, const cuda_executor& ex) {
  run_conv_elements(pass, pass.batch * G::positions * G::out_channels, ex);
}
#endif

}  // namespace fusor::nn::detail
