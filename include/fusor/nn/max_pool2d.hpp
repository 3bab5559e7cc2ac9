// fusor/nn/max_pool2d.hpp — 2-D max pooling over NCHW images, as PyTorch's
// nn.MaxPool2d(Window, Stride) without padding (floor mode).
//
//   nn::max_pool2d<2>      // features<C, H, W> -> features<C, H / 2, W / 2>
//   nn::max_pool2d<3, 2>   // overlapping windows: (H - 3) / 2 + 1 rows out
//
// Forward keeps, for each output, where its maximum was (an int32 per output,
// h * W + w within the image plane, allocated in reserve()); the first maximum
// of a window wins a tie, a NaN wins over any number. Backward writes all of
// dx, deterministically and without atomics: every input element sums the
// output gradients whose maximum it was (a gather; on the host, disjoint
// windows scatter each plane's gradients onto their maxima instead). A window
// larger than the image is a compile-time error.
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

/// nn::max_pool2d's input rule (nn/layer.hpp): the pooling window fits the image it is given. Named in the
/// compiler's message with the window and the image's height and width.
template <std::size_t Window, std::size_t Height, std::size_t Width, bool Fits>
struct pool_window_must_fit_the_image {
  /// Whether the window fits.
  static constexpr bool value = Fits;
  /// Fails to compile when the window does not fit (nn::network's constructors call it).
  static constexpr void check() {
    static_assert(Fits, "fusor: nn::max_pool2d: the pooling window is larger than the image; make the window "
                        "smaller or the image larger; see pool_window_must_fit_the_image<window, image height, "
                        "image width>");
  }
};

namespace detail {
// The sizes of one pooling, as compile-time constants.
template <std::size_t Height, std::size_t Width, std::size_t Window, std::size_t Stride, std::size_t OutHeight,
          std::size_t OutWidth>
struct pool_geometry {
  static constexpr index_t height = Height, width = Width, window = Window, stride = Stride, out_height = OutHeight,
                           out_width = OutWidth;
  static constexpr index_t inputs_per_plane = height * width, outputs_per_plane = out_height * out_width;
  // The first window (along one axis) that holds position v.
  FUSOR_HOST_DEVICE static constexpr index_t first_window(index_t v) { return v < window ? 0 : (v - window) / stride + 1; }
};

template <class Element, class Compute, class G>
struct pool_forward_pass {
  const Element* x;
  Element* y;
  std::int32_t* argmax;

  // Output o (over batch, channels, rows, columns).
  FUSOR_HOST_DEVICE void operator()(index_t o) const {
    const index_t plane = o / G::outputs_per_plane, p = o % G::outputs_per_plane;
    window_maximum(x + plane * G::inputs_per_plane, p / G::out_width, p % G::out_width, y + o, argmax + o);
  }
  // Every output of one image plane (host).
  void plane(index_t index) const {
    const index_t first = index * G::outputs_per_plane;
    for (index_t oh = 0; oh < G::out_height; ++oh)
      for (index_t ow = 0; ow < G::out_width; ++ow) {
        const index_t o = first + oh * G::out_width + ow;
        window_maximum(x + index * G::inputs_per_plane, oh, ow, y + o, argmax + o);
      }
  }
  FUSOR_HOST_DEVICE static void window_maximum(const Element* in, index_t oh, index_t ow, Element* out,
                                               std::int32_t* where) {
    const index_t h0 = oh * G::stride, w0 = ow * G::stride;
    index_t best_at = h0 * G::width + w0;
    Compute best = convert<Compute>(in[best_at]);
    for (index_t i = 0; i < G::window; ++i)
      for (index_t j = 0; j < G::window; ++j) {
        const index_t at = (h0 + i) * G::width + w0 + j;
        const Compute v = convert<Compute>(in[at]);
        if (v > best || (v != v && best == best)) best = v, best_at = at;
      }
    *out = convert<Element>(best);
    *where = static_cast<std::int32_t>(best_at);
  }
};

template <class Element, class Compute, class G>
struct pool_backward_pass {
  const Element* dy;
  Element* dx;
  const std::int32_t* argmax;

  // Input element e: the sum of dy over the windows holding e whose maximum e was.
  FUSOR_HOST_DEVICE void operator()(index_t e) const {
    const index_t plane = e / G::inputs_per_plane, at = e % G::inputs_per_plane;
    const index_t h = at / G::width, w = at % G::width;
    const index_t oh1 = h / G::stride < G::out_height ? h / G::stride : G::out_height - 1;
    const index_t ow1 = w / G::stride < G::out_width ? w / G::stride : G::out_width - 1;
    const index_t base = plane * G::outputs_per_plane;
    Compute sum = 0;
    for (index_t oh = G::first_window(h); oh <= oh1; ++oh)
      for (index_t ow = G::first_window(w); ow <= ow1; ++ow) {
        const index_t o = base + oh * G::out_width + ow;
        if (argmax[o] == at) sum += convert<Compute>(dy[o]);
      }
    dx[e] = convert<Element>(sum);
  }
  // One image plane (host). Disjoint windows: zeros, then each output's
  // gradient onto its maximum (at most one per input). Overlapping: the gather above.
  void plane(index_t index) const {
    if constexpr (G::stride >= G::window) {
      const Element* gradient = dy + index * G::outputs_per_plane;
      const std::int32_t* where = argmax + index * G::outputs_per_plane;
      Element* out = dx + index * G::inputs_per_plane;
      std::fill_n(out, G::inputs_per_plane, convert<Element>(0.0f));
      for (index_t o = 0; o < G::outputs_per_plane; ++o) out[where[o]] = gradient[o];
    } else {
      for (index_t e = index * G::inputs_per_plane; e < (index + 1) * G::inputs_per_plane; ++e) (*this)(e);
    }
  }
};

template <class Element, class Compute, class G>
void run_pool_forward(const pool_forward_pass<Element, Compute, G>& pass, index_t planes, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(planes * G::inputs_per_plane);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t p = 0; p < planes; ++p) pass.plane(p);
}
template <class Element, class Compute, class G>
void run_pool_backward(const pool_backward_pass<Element, Compute, G>& pass, index_t planes, const host_executor& ex) {
  [[maybe_unused]] const int team = ex.thread_count(planes * G::inputs_per_plane);
#if FUSOR_HAS_OPENMP
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
#endif
  for (index_t p = 0; p < planes; ++p) pass.plane(p);
}

#if FUSOR_HAS_CUDA
template <class Pass>
__global__ void pool_pass_kernel(const Pass pass, index_t count) {
  for (index_t i = index_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += index_t(gridDim.x) * blockDim.x)
    pass(i);
}
template <class Pass>
void run_pool_pass(const Pass& pass, index_t count, const cuda_executor& ex) {
  gpu::require("nn::max_pool2d on the cuda executor");
  if (count == 0) return;
  constexpr int block = 256;
  const index_t grid = std::min<index_t>((count + block - 1) / block, index_t(gpu::multiprocessor_count()) * 16);
  pool_pass_kernel<<<int(grid), block, 0, ex.stream>>>(pass, count);
  FUSOR_CUDA_CHECK(cudaGetLastError());
  gpu::launch_counter().fetch_add(1);
}
template <class Element, class Compute, class G>
void run_pool_forward(const pool_forward_pass<Element, Compute, G>& pass, index_t planes, const cuda_executor& ex) {
  run_pool_pass(pass, planes * G::outputs_per_plane, ex);
}
template <class Element, class Compute, class G>
void run_pool_backward(const pool_backward_pass<Element, Compute, G>& pass, index_t planes, const cuda_executor& ex) {
  run_pool_pass(pass, planes * G::inputs_per_plane, ex);
}
#endif
}  // namespace detail

/// 2-D max pooling over NCHW images with a Window x Window window and stride Stride, no padding (floor mode),
/// as PyTorch's nn.MaxPool2d(Window, Stride); a layer descriptor for sequential<>.
template <std::size_t Window, std::size_t Stride = Window, class... Policies>
struct max_pool2d {
  static_assert(Window > 0 && Stride > 0, "fusor: nn::max_pool2d needs a positive window and stride");
  /// The layer's policies, defaults filled in; the layout must be nchw.
  using policies = layer_policies<nchw, Policies...>;

  /// Whether features F can come in: any image, features<C, H, W>.
  template <class F>
  static constexpr bool accepts = is_image_v<F>;
  using expected_input = features<1, Window, Window>;  ///< an image: features<channels, height, width>

  /// The output sizes for input features F (defined for images only).
  template <class F>
  struct shape;
  /// The output sizes for an image of C channels, H rows and W columns.
  template <std::size_t C, std::size_t H, std::size_t W>
  struct shape<features<C, H, W>> {
    /// The layer's input rule for this image: the window fits (input_rule, nn/layer.hpp).
    using rule = pool_window_must_fit_the_image<Window, H, W, (Window <= H && Window <= W)>;
    /// Whether the window fits the image (where not, nn::network's constructors fail to compile, naming `rule`).
    static constexpr bool fits = rule::value;
    /// Output rows, (H - Window) / Stride + 1.
    /// After the error above, one output row or column: no second error about sizes.
    static constexpr std::size_t out_height = fits ? (H - Window) / Stride + 1 : 1;
    /// (W - Window) / Stride + 1
    static constexpr std::size_t out_width = fits ? (W - Window) / Stride + 1 : 1;
    /// The output features
    using type = features<C, out_height, out_width>;
    /// The pooling's sizes as compile-time constants, for the kernels.
    using geometry = detail::pool_geometry<H, W, Window, Stride, out_height, out_width>;
    /// Channels, unchanged by pooling
    static constexpr index_t channels = C;
  };
  /// The features that go out for input features F: features<C, out_height, out_width>.
  template <class F>
  using output = typename shape<F>::type;
  /// The rule on an image F beyond its size: the window fits it (nn/layer.hpp's input_rule).
  template <class F>
  using input_rule = typename shape<F>::rule;

  /// The pooling bound to input features F, the network's precision and memory Space; holds the argmax indices.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// The activations' precision: the layer's precision policy, or the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The image that comes in
    using input_features = F;
    /// The pooled image that goes out
    using output_features = output<F>;
    /// x and dx, batch first
    using input_view = activation_view<precision, input_features, Space>;
    /// y and dy, batch first
    using output_view = activation_view<precision, output_features, Space>;
    /// The pooling's sizes as compile-time constants
    using geometry = typename shape<F>::geometry;

    /// None: pooling has no parameters.
    static std::vector<parameter_spec> parameters() { return {}; }
    /// Does nothing (no parameters to bind).
    void bind(const parameter_binding<storage_t<precision>, Space>&) {}
    /// Allocates the argmax indices (an int32 per output) for batches of up to max_batch, in Space.
    void reserve(index_t max_batch, stream_t stream) {
      argmax_ = tensor<std::int32_t, typename output_features::batched_extents, row_major, Space>(
          typename output_features::batched_extents(max_batch), stream);
    }

    /// y = the maximum of each window of x; records where each maximum was (first wins a tie, NaN wins).
    template <class Executor>
    void forward(const input_view& x, const output_view& y, const run_mode&, const Executor& ex) {
      detail::run_pool_forward(detail::pool_forward_pass<element, compute, geometry>{x.data(), y.data(), argmax_.data()},
                               planes(x), ex);
    }
    /// Writes all of dx: each input element gets the sum of dy over the outputs whose maximum it was,
    /// deterministically; does nothing when dx.data() is null.
    template <class Executor>
    void backward(const input_view&, const output_view&, const output_view& dy, const input_view& dx,
                  const Executor& ex) {
      if (dx.data() == nullptr) return;
      detail::run_pool_backward(
          detail::pool_backward_pass<element, compute, geometry>{dy.data(), dx.data(), argmax_.data()}, planes(dx), ex);
    }

    /// Where each output's maximum was (h * W + w in its image plane), for the last forward.
    const std::int32_t* argmax() const { return argmax_.data(); }

   private:
    using element = storage_t<precision>;
    using compute = compute_t<precision>;
    static index_t planes(const input_view& x) { return x.extent(0) * shape<F>::channels; }
    tensor<std::int32_t, typename output_features::batched_extents, row_major, Space> argmax_;
  };
};

}  // namespace fusor::nn
