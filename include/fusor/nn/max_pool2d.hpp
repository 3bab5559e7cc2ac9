// fusor/nn/max_pool2d.hpp — 2-D max pooling over NCHW images, as PyTorch's
// nn.MaxPool2d(Window, Stride) without padding (floor mode).
//
//   nn::max_pool2d<2>      // features<C, H, W> -> features<C, H / 2, W / 2>
//   nn::max_pool2d<3, 2>   // overlapping windows: (H - 3) / 2 + 1 rows out
//
// Forward keeps, for each output, where its maximum was (an int32 per output,
// h * W + w within the image plane, allocated in reserve()); the first maximum
// of a window wins a tie, a NaN wins over any number. Backward gathers: every
// input element sums the output gradients whose maximum it was, so dx is
// written in full, deterministically and without atomics, also when windows
// overlap. A window larger than the image is a compile-time error.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "fusor/config.hpp"
#include "fusor/core/precision.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/exec/host.hpp"
#include "fusor/nn/layer.hpp"

#if FUSOR_HAS_CUDA
#include "fusor/core/cuda_runtime.hpp"
#include "fusor/exec/cuda.hpp"
#endif

namespace fusor::nn {

// Compile-time error: the pooling window does not fit the image it is given.
template <std::size_t Window, std::size_t Height, std::size_t Width, bool Fits>
struct pool_window_must_fit_the_image {
  static_assert(Fits,
                "fusor: nn::max_pool2d: the pooling window is larger than the image; see "
                "pool_window_must_fit_the_image<window, image height, image width>");
  static constexpr bool value = Fits;
};

namespace detail {
// Sizes of one pooling, in the loops' index type.
struct pool_geometry {
  index_t channels, height, width, out_height, out_width, window, stride;
  FUSOR_HOST_DEVICE index_t outputs_per_plane() const { return out_height * out_width; }
  FUSOR_HOST_DEVICE index_t inputs_per_plane() const { return height * width; }
};

template <class Element, class Compute>
struct pool_forward_pass {
  const Element* x;
  Element* y;
  std::int32_t* argmax;
  pool_geometry g;
  // Output o (over batch, channels, rows, columns).
  FUSOR_HOST_DEVICE void operator()(index_t o) const {
    const index_t plane = o / g.outputs_per_plane(), p = o % g.outputs_per_plane();
    const index_t h0 = p / g.out_width * g.stride, w0 = p % g.out_width * g.stride;
    const Element* in = x + plane * g.inputs_per_plane();
    index_t best_at = h0 * g.width + w0;
    Compute best = convert<Compute>(in[best_at]);
    for (index_t i = 0; i < g.window; ++i)
      for (index_t j = 0; j < g.window; ++j) {
        const index_t at = (h0 + i) * g.width + w0 + j;
        const Compute v = convert<Compute>(in[at]);
        if (v > best || (v != v && best == best)) best = v, best_at = at;
      }
    y[o] = convert<Element>(best);
    argmax[o] = static_cast<std::int32_t>(best_at);
  }
};

template <class Element, class Compute>
struct pool_backward_pass {
  const Element* dy;
  Element* dx;
  const std::int32_t* argmax;
  pool_geometry g;
  // Input element e: the sum of dy over the windows holding e whose maximum e was.
  FUSOR_HOST_DEVICE void operator()(index_t e) const {
    const index_t plane = e / g.inputs_per_plane(), at = e % g.inputs_per_plane();
    const index_t h = at / g.width, w = at % g.width;
    const index_t oh1 = h / g.stride < g.out_height ? h / g.stride : g.out_height - 1;
    const index_t ow1 = w / g.stride < g.out_width ? w / g.stride : g.out_width - 1;
    const index_t base = plane * g.outputs_per_plane();
    Compute sum = 0;
    for (index_t oh = first_window(h); oh <= oh1; ++oh)
      for (index_t ow = first_window(w); ow <= ow1; ++ow) {
        const index_t o = base + oh * g.out_width + ow;
        if (argmax[o] == at) sum += convert<Compute>(dy[o]);
      }
    dx[e] = convert<Element>(sum);
  }
  // The first window (along one axis) that holds position v.
  FUSOR_HOST_DEVICE index_t first_window(index_t v) const { return v < g.window ? 0 : (v - g.window) / g.stride + 1; }
};

template <class Pass>
void run_pool_pass(const Pass& pass, index_t count, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(count * 4);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t i = 0; i < count; ++i) pass(i);
}

#if FUSOR_HAS_CUDA
template <class Pass>
__global__ void pool_pass_kernel(const Pass pass, index_t count) {
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += index_t(gridDim.x) * blockDim.x)
    pass(i);
}
template <class Pass>
void run_pool_pass(const Pass& pass, index_t count, const cuda_executor& ex) {
  cuda::require("nn::max_pool2d on the cuda executor");
  if (count == 0) return;
  constexpr int block = 256;
  const index_t grid = std::min<index_t>((count + block - 1) / block, index_t(cuda::multiprocessor_count()) * 16);
  pool_pass_kernel<<<int(grid), block, 0, ex.stream>>>(pass, count);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  cuda::launch_counter().fetch_add(1);
}
#endif
}  // namespace detail

template <std::size_t Window, std::size_t Stride = Window, class... Policies>
struct max_pool2d {
  static_assert(Window > 0 && Stride > 0, "fusor::nn::max_pool2d needs a positive window and stride");
  using policies = layer_policies<nchw, Policies...>;
  static_assert(std::is_same_v<typename policies::layout, nchw>,
                "fusor::nn::max_pool2d: images are NCHW (nn::layout<nchw>, the default)");

  template <class F>
  static constexpr bool accepts = is_image_v<F>;
  using expected_input = features<1, Window, Window>;  // an image: features<channels, height, width>

  template <class F>
  struct shape;
  template <std::size_t C, std::size_t H, std::size_t W>
  struct shape<features<C, H, W>> {
    static constexpr bool fits = pool_window_must_fit_the_image<Window, H, W, (Window <= H && Window <= W)>::value;
    // After the error above, one output row or column: no second error about sizes.
    static constexpr std::size_t out_height = fits ? (H - Window) / Stride + 1 : 1;
    static constexpr std::size_t out_width = fits ? (W - Window) / Stride + 1 : 1;
    using type = features<C, out_height, out_width>;
    static constexpr detail::pool_geometry geometry{index_t(C), index_t(H), index_t(W), index_t(out_height),
                                                    index_t(out_width), index_t(Window), index_t(Stride)};
  };
  template <class F>
  using output = typename shape<F>::type;

  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    using input_features = F;
    using output_features = output<F>;
    using input_view = activation_view<precision, input_features, Space>;
    using output_view = activation_view<precision, output_features, Space>;
    static constexpr detail::pool_geometry geometry = shape<F>::geometry;

    static std::vector<parameter_spec> parameters() { return {}; }
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    void reserve(index_t max_batch, stream_t stream) {
      argmax_ = tensor<std::int32_t, typename output_features::batched_extents, row_major, Space>(
          typename output_features::batched_extents(max_batch), stream);
    }

    template <class Executor>
    void forward(const input_view& x, const output_view& y, const run_mode&, const Executor& ex) {
      detail::run_pool_pass(detail::pool_forward_pass<element, compute>{x.data(), y.data(), argmax_.data(), geometry},
                            y.size(), ex);
    }
    template <class Executor>
    void backward(const input_view&, const output_view&, const output_view& dy, const input_view& dx,
                  const Executor& ex) {
      if (dx.data() == nullptr) return;
      detail::run_pool_pass(detail::pool_backward_pass<element, compute>{dy.data(), dx.data(), argmax_.data(), geometry},
                            dx.size(), ex);
    }

    // Where each output's maximum was (h * W + w in its image plane), for the last forward.
    const std::int32_t* argmax() const { return argmax_.data(); }

   private:
    using element = storage_t<precision>;
    using compute = compute_t<precision>;
    tensor<std::int32_t, typename output_features::batched_extents, row_major, Space> argmax_;
  };
};

}  // namespace fusor::nn
