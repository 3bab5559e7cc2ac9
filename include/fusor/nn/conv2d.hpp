// fusor/nn/conv2d.hpp — a 2-D convolution over NCHW images, as PyTorch's
// nn.Conv2d(InChannels, OutChannels, Kernel, Stride, Padding) (square kernel,
// zero padding, no dilation or groups), so that a small CNN can be built.
//
//   nn::conv2d<1, 32, 3, 1, 1>   // features<1, 28, 28> -> features<32, 28, 28>
//   nn::conv2d<3, 8, 3, 2, 1>    // features<3, 7, 9>   -> features<8, 4, 5>
//
// Weight [Out, In, K, K] and bias [Out] as PyTorch's, initialised as it does:
// U(+-1/sqrt(In * K * K)). Output size (H + 2 Padding - K) / Stride + 1 per
// axis; a kernel larger than the padded image is a compile-time error.
//
// im2col + GEMM (nn/im2col.hpp), with the batch folded into the GEMMs' rows so
// each of the three products is one OpenBLAS / cuBLASLt call:
//   forward   columns = im2row(x)                  [R, In K K], R = batch * OH * OW
//             z = columns weight^T                 [R, Out]
//             y = z + bias, to NCHW                one pass
//   backward  dz = dy, to rows; dbias = sums of dy one pass (on the GPU dbias is
//                                                  the next GEMM's fused epilogue, or
//                                                  fusor's sums after it where cuBLASLt
//                                                  has no algorithm with that epilogue)
//             dweight = dz^T columns               [Out, In K K]
//             dcolumns = dz weight                 [R, In K K] (into columns' memory)
//             dx = row2im(dcolumns)                one pass, deterministic
// Kept for backward: the columns of the last forward (R x In K K elements,
// reserve()d for max_batch, with the [R, Out] product buffer). backward
// reuses the columns' memory for dcolumns: one backward per forward.
// Layout: NCHW (nn::layout<nchw>, the default) only.
#pragma once

#include <type_traits>
#include <vector>

#include "fusor/core/strided_views.hpp"
#include "fusor/core/tensor.hpp"
#include "fusor/kernels/matmul.hpp"
#include "fusor/nn/im2col.hpp"
#include "fusor/nn/layer.hpp"

namespace fusor::nn {

/// nn::conv2d's input rule (nn/layer.hpp): the kernel fits the padded image it is given; named in the compiler's
/// message with the kernel, the padding and the image's height and width.
template <std::size_t Kernel, std::size_t Padding, std::size_t Height, std::size_t Width, bool Fits>
struct conv_kernel_must_fit_the_padded_image {
  /// Whether the kernel fits.
  static constexpr bool value = Fits;
  /// Fails to compile when it does not (nn::network's constructors and nn::sequential<> call it).
  static constexpr void check() {
    static_assert(Fits, "fusor: nn::conv2d: the kernel is larger than the padded image; make the kernel smaller, "
                        "the padding or the image larger; see conv_kernel_must_fit_the_padded_image<kernel, padding, "
                        "image height, image width>");
  }
};

template <std::size_t InChannels, std::size_t OutChannels, std::size_t Kernel, std::size_t Stride = 1,
          std::size_t Padding = 0, class... Policies>
/// A 2-D convolution over NCHW images, as PyTorch's `nn.Conv2d(InChannels, OutChannels, Kernel, Stride, Padding)`:
/// square kernel, zero padding, no dilation or groups.
///
/// Weight [Out, In, K, K] and bias [Out], initialised `U(+-1/sqrt(In K K))` as PyTorch does; each output axis is
/// `(H + 2 Padding - K) / Stride + 1`. im2col and one GEMM per product; the columns are kept for backward.
struct conv2d {
  static_assert(InChannels > 0 && OutChannels > 0 && Kernel > 0 && Stride > 0,
                "fusor: nn::conv2d needs positive channel counts, kernel size and stride");
  /// The layer's policies, resolved (nn/policies.hpp): the layout must be nchw and there is no parallel strategy.
  using policies = layer_policies<nchw, Policies...>;
  static_assert(std::is_same_v<typename policies::parallel, no_parallel>,
                "fusor: nn::conv2d: no parallel strategy splits a convolution yet");

  /// An image `features<InChannels, H, W>` of any height and width (one the kernel does not fit is an error when the
  /// output is inferred).
  template <class F>
  static constexpr bool accepts = [] {
    if constexpr (is_image_v<F>) return detail::feature_extent<0>(F{}) == InChannels;
    else return false;
  }();
  /// The side of the smallest image it takes, `features<InChannels, smallest, smallest>`: `Kernel - 2 Padding`, at
  /// least 1.
  static constexpr std::size_t smallest = Kernel > 2 * Padding ? Kernel - 2 * Padding : 1;
  /// Named in mismatch errors: the smallest image it takes.
  using expected_input = features<InChannels, smallest, smallest>;

  /// Output shape and im2col geometry for input features F; defined for images only.
  template <class F>
  struct shape;
  /// Output shape and im2col geometry for an image `features<C, H, W>`.
  template <std::size_t C, std::size_t H, std::size_t W>
  struct shape<features<C, H, W>> {
    /// The layer's input rule for this image: the kernel fits it, padded (input_rule, nn/layer.hpp).
    using rule = conv_kernel_must_fit_the_padded_image<Kernel, Padding, H, W,
                                                       (Kernel <= H + 2 * Padding && Kernel <= W + 2 * Padding)>;
    /// Whether the kernel fits the padded image (where not, nn::network's constructors fail to compile, naming `rule`).
    static constexpr bool fits = rule::value;
    /// Output height, `(H + 2 Padding - Kernel) / Stride + 1`. After the error above, a 1 x 1 output: no second error
    /// about sizes.
    static constexpr std::size_t out_height = fits ? (H + 2 * Padding - Kernel) / Stride + 1 : 1;
    /// Output width, `(W + 2 Padding - Kernel) / Stride + 1` (1 after the error above).
    static constexpr std::size_t out_width = fits ? (W + 2 * Padding - Kernel) / Stride + 1 : 1;
    /// The output features, `features<OutChannels, out_height, out_width>`.
    using type = features<OutChannels, out_height, out_width>;
    /// The im2col geometry of this image (nn/im2col.hpp).
    using geometry = detail::conv_geometry<InChannels, H, W, OutChannels, Kernel, Stride, Padding, out_height, out_width>;
  };
  /// The output features for input image F.
  template <class F>
  using output = typename shape<F>::type;
  /// The rule on an image F beyond its size: the kernel fits it, padded (nn/layer.hpp's input_rule).
  template <class F>
  using input_rule = typename shape<F>::rule;

  /// The convolution given an input image F, the network's precision and a memory Space: views of its weight and bias,
  /// and the im2col columns of the last forward, kept for backward.
  template <class F, class NetworkPrecision, class Space>
  class instance {
   public:
    /// Precision of x, y and the parameters: the precision policy's, else the network's.
    using precision = resolve_precision<typename policies::precision, NetworkPrecision>;
    /// The element type `precision` stores.
    using element = storage_t<precision>;
    /// F, the input image's features.
    using input_features = F;
    /// `features<OutChannels, out height, out width>`.
    using output_features = output<F>;
    /// A batch of x (or dx), NCHW.
    using input_view = activation_view<precision, input_features, Space>;
    /// A batch of y (or dy), NCHW.
    using output_view = activation_view<precision, output_features, Space>;
    /// The im2col geometry of F (nn/im2col.hpp).
    using geometry = typename shape<F>::geometry;
    /// Columns of the im2col matrix: `InChannels * Kernel * Kernel`.
    static constexpr std::size_t columns = std::size_t(geometry::columns);
    /// Output positions per image: out height times out width.
    static constexpr std::size_t positions = std::size_t(geometry::positions);
    /// The weight as a [OutChannels, InChannels K K] matrix: PyTorch's [Out, In, K, K], row-major.
    using weight_view = view<precision, extents<index_t, OutChannels, columns>, row_major, Space>;
    /// The bias, [OutChannels].
    using bias_view = view<precision, extents<index_t, OutChannels>, row_major, Space>;

    /// weight [Out, In, K, K] and bias [Out], both `U(+-1/sqrt(In K K))` as PyTorch's.
    static std::vector<parameter_spec> parameters() {
      const index_t fan_in = index_t(columns);
      return {{"weight", {index_t(OutChannels), index_t(InChannels), index_t(Kernel), index_t(Kernel)},
               initializer::uniform_fan_in(fan_in)},
              {"bias", {index_t(OutChannels)}, initializer::uniform_fan_in(fan_in)}};
    }
    /// Views the bound weight, bias and their gradients.
    void bind(const parameter_binding<element, Space>& p) {
      weight_ = shaped<precision, extents<index_t, OutChannels, columns>>(p.values[0]);
      bias_ = shaped<precision, extents<index_t, OutChannels>>(p.values[1]);
      weight_gradient_ = shaped<precision, extents<index_t, OutChannels, columns>>(p.gradients[0]);
      bias_gradient_ = shaped<precision, extents<index_t, OutChannels>>(p.gradients[1]);
    }
    /// Allocates on `stream` the columns [max_batch * positions, columns] and the product buffer [max_batch *
    /// positions, OutChannels], plus, in a host-accessible space where the element type is not the compute type (bf16,
    /// fp16), per-thread fp32 scratch for row2im.
    void reserve(index_t max_batch, stream_t stream) {
      columns_ = column_tensor(column_extents(max_batch * index_t(positions)), stream);
      products_ = product_tensor(product_extents(max_batch * index_t(positions)), stream);
      if constexpr (Space::host_accessible && !std::is_same_v<element, accumulator>) {
        int threads = 1;
#if FUSOR_HAS_OPENMP
        threads = omp_get_max_threads();
#endif
        scratch_ = scratch_tensor(dextents<index_t, 1>(threads * geometry::image_size), stream);
      }
    }

    /// y = convolution of x plus bias: im2row, one GEMM with the weight, then the bias and the NCHW layout in one pass;
    /// keeps the columns for backward.
    template <class Executor>
    void forward(const input_view& x, const output_view& y, const run_mode&, const Executor& ex) {
      const index_t batch = x.extent(0), rows = batch * index_t(positions);
      detail::im2row(detail::im2row_pass<element, geometry>{x.data(), columns_.data()}, batch, ex);
      matmul(product_matrix(rows), column_matrix(rows), transpose(weight_), epilogue::none{}, ex);
      detail::rows_to_nchw(
          detail::rows_to_nchw_pass<element, accumulator, geometry>{products_.data(), bias_.data(), y.data()}, batch, ex);
    }

    /// dweight and dbias from dy and the kept columns; dx, when wanted, through dcolumns = dz weight (in the columns'
    /// memory: one backward per forward) and a deterministic row2im.
    template <class Executor>
    void backward(const input_view&, const output_view&, const output_view& dy, const input_view& dx,
                  const Executor& ex) {
      const index_t batch = dy.extent(0), rows = batch * index_t(positions);
      constexpr bool on_host = std::is_same_v<Executor, host_executor>;
      // dz (in the product's memory); the host sums dbias on the way.
      detail::nchw_to_rows(detail::nchw_to_rows_pass<element, accumulator, geometry>{
                               dy.data(), products_.data(), on_host ? bias_gradient_.data() : nullptr, batch},
                           ex);
      const auto dz = product_matrix(rows);
      if constexpr (on_host)
        matmul(weight_gradient_, transpose(dz), column_matrix(rows), epilogue::none{}, ex);
      else
        matmul(weight_gradient_, transpose(dz), column_matrix(rows), epilogue::bias_gradient_a(bias_gradient_), ex);
      if (dx.data() == nullptr) return;
      matmul(column_matrix(rows), dz, weight_, epilogue::none{}, ex);  // dcolumns, over the columns
      detail::row2im(
          detail::row2im_pass<element, accumulator, geometry>{columns_.data(), dx.data(), scratch_.data(), scratch_images()},
          batch, ex);
    }

    /// The bound weight, [OutChannels, InChannels K K].
    weight_view weight() const { return weight_; }
    /// The bound bias, [OutChannels].
    bias_view bias() const { return bias_; }

   private:
    using accumulator = compute_t<precision>;  // fp32 for bf16/fp16 sums and bias additions
    using column_extents = extents<index_t, dynamic, columns>;
    using product_extents = extents<index_t, dynamic, OutChannels>;
    using column_tensor = tensor<precision, column_extents, row_major, Space>;
    using product_tensor = tensor<precision, product_extents, row_major, Space>;
    using scratch_tensor = tensor<accumulator, dextents<index_t, 1>, row_major, Space>;

    view<precision, column_extents, row_major, Space> column_matrix(index_t rows) const {
      return {columns_.data(), rows};
    }
    view<precision, product_extents, row_major, Space> product_matrix(index_t rows) const {
      return {products_.data(), rows};
    }
    index_t scratch_images() const { return scratch_.size() / geometry::image_size; }

    weight_view weight_{}, weight_gradient_{};
    bias_view bias_{}, bias_gradient_{};
    column_tensor columns_;
    product_tensor products_;
    scratch_tensor scratch_;
  };
};

}  // namespace fusor::nn
