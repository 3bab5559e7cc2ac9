// fusor/nn/branches.hpp — parallel branches over the same input, joined:
//
//   nn::branches<nn::join_add, nn::chain<nn::linear<32, 64, nn::relu>, nn::linear<64, 16>>,
//                              nn::linear<32, 16>>          // y = f(x) + g(x)
//   nn::branches<nn::join_concat, nn::layernorm<8>, nn::chain<...>>   // y = [f(x), g(x)] on the last axis
//
// Each branch is a chain (a bare layer counts as a chain of one). join_add:
// every branch gives the same features, summed (one fused pass). join_concat:
// the branches' outputs are concatenated along the last feature axis, the
// other axes equal (one copy pass per branch). Compile-time errors name the
// branch and both shapes (branch_outputs_must_match).
// Parameters: "<branch>.<layer>.<name>" ("1.0.weight": branch 1, its layer 0).
// Backward: every branch from dy (its slice of dy for concat), and
// dx = the sum of the branches' input gradients (one fused pass).
// Kept for backward: each branch's output and what its chain keeps. Scratch:
// one copy of dy (or of a slice), the input gradients of branches 1 on, and
// the largest scratch of a branch (the branches run one after the other).
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <tuple>
#include <type_traits>

#include "fusor/core/strided_views.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/nn/chain.hpp"
#include "fusor/nn/recompute.hpp"

namespace fusor::nn {

/// How branches join: summed, every branch giving the same features.
struct join_add {};
/// How branches join: concatenated along the last feature axis, the other axes equal.
struct join_concat {};

/// Compile-time error for branches that cannot be joined: the failing
/// instantiation names the join, the branch and both features.
template <class Join, std::size_t Branch, class FirstBranchOutput, class BranchOutput, bool Match>
struct branch_outputs_must_match {
  static_assert(Match,
                "fusor: nn::branches: join_add needs every branch to give the first branch's features; join_concat "
                "the same rank and all axes but the last equal; see branch_outputs_must_match<join, branch, first "
                "branch's features, this branch's features>");
  /// Match; where it is false the static_assert above stops the build.
  static constexpr bool value = Match;
};

namespace detail {
// A branch names its parameters as a chain does ("<i>.<name>"): a chain, or a recomputed chain (recomputed adds
// no level), is taken as it is; any other layer, a composite included, becomes a chain of one.
template <class Layer>
inline constexpr bool names_as_chain = is_chain_v<Layer>;
template <class... Layers>
inline constexpr bool names_as_chain<recomputed<Layers...>> = is_chain_v<typename recomputed<Layers...>::block>;
template <class Layer>
using as_chain = std::conditional_t<names_as_chain<Layer>, Layer, chain<Layer>>;

template <class F>
inline constexpr std::size_t last_extent = feature_extent<F::rank - 1>(F{});

// Whether two features can be concatenated along the last axis.
template <class A, class B>
constexpr bool concatenable() {
  if constexpr (A::rank != B::rank) {
    return false;
  } else {
    return []<std::size_t... K>(std::index_sequence<K...>) {
      return ((feature_extent<K>(A{}) == feature_extent<K>(B{})) && ...);
    }(std::make_index_sequence<A::rank - 1>{});
  }
}
template <class F, std::size_t Last, class Seq = std::make_index_sequence<F::rank - 1>>
struct with_last_extent;
template <class F, std::size_t Last, std::size_t... K>
struct with_last_extent<F, Last, std::index_sequence<K...>> {
  using type = features<feature_extent<K>(F{})..., Last>;
};

template <class Join, class First, class... Outputs>
struct joined_features {
  template <std::size_t... B>
  static constexpr bool check(std::index_sequence<B...>) {
    return (branch_outputs_must_match<Join, B + 1, First, Outputs,
                                      std::is_same_v<Join, join_add> ? std::is_same_v<First, Outputs>
                                                                     : concatenable<First, Outputs>()>::value &&
            ...);
  }
  static constexpr bool match = check(std::index_sequence_for<Outputs...>{});
  using concatenated = typename with_last_extent<First, (last_extent<First> + ... + last_extent<Outputs>)>::type;
  using type = std::conditional_t<std::is_same_v<Join, join_add> || !match, First, concatenated>;
};
}  // namespace detail

/// Parallel branches over the same input, joined: `y = f(x) + g(x)` with join_add, `y = [f(x), g(x)]` on the last
/// feature axis with join_concat.
///
/// Each branch is a chain (a bare layer counts as a chain of one). Parameters are named `"<branch>.<layer>.<name>"`;
/// backward gives every branch dy (its slice for join_concat) and sums their dx.
template <class Join, class... Branches>
struct branches {
  static_assert(std::is_same_v<Join, join_add> || std::is_same_v<Join, join_concat>,
                "fusor: nn::branches' first argument is how the branches join: nn::join_add or nn::join_concat");
  static_assert(sizeof...(Branches) >= 1, "fusor: nn::branches needs at least one branch");
  /// Number of branches.
  static constexpr std::size_t count = sizeof...(Branches);
  /// The first branch, as a chain.
  using first_branch = detail::as_chain<std::tuple_element_t<0, std::tuple<Branches...>>>;

  /// The first branch decides what comes in; a branch further on that does not
  /// take it fails its chain's input rule (input_rule below).
  template <class In>
  static constexpr bool accepts = first_branch::template accepts<In>;
  /// The rule on what comes in (nn/layer.hpp): every branch's chain's (its inner sizes); the first that fails.
  template <class In>
  using input_rule =
      typename detail::first_failing_rule<typename detail::as_chain<Branches>::template input_rule<In>...>::type;
  /// The first branch's expected input.
  using expected_input = typename first_branch::expected_input;
  /// The joined features given In: the first branch's for join_add; for join_concat, the branches' outputs with their
  /// last extents summed.
  template <class In>
  using output =
      typename detail::joined_features<Join, typename detail::as_chain<Branches>::template output<In>...>::type;

  /// `"nn::branches of N (added)"` or `"... (concatenated)"`, for messages.
  static std::string name() {
    return "nn::branches of " + std::to_string(count) +
           (std::is_same_v<Join, join_add> ? " (added)" : " (concatenated)");
  }

  /// Each branch's chain instance, given what comes in (a std::tuple).
  template <class In, class NetworkPrecision, class Space>
  using branch_instances =
      std::tuple<typename detail::as_chain<Branches>::template instance<In, NetworkPrecision, Space>...>;
  template <class In, class NetworkPrecision, class Space>
  class instance;
};

/// The branches given input features In, the network's precision and a memory Space: each branch's chain instance and
/// the branches' outputs.
template <class Join, class... Branches>
template <class In, class NetworkPrecision, class Space>
class branches<Join, Branches...>::instance
    : public detail::composite_shards<instance<In, NetworkPrecision, Space>, Space,
                                      branch_instances<In, NetworkPrecision, Space>> {
  using branch_tuple = branch_instances<In, NetworkPrecision, Space>;
  template <std::size_t B>
  using branch_type = std::tuple_element_t<B, branch_tuple>;
  static constexpr bool add = std::is_same_v<Join, join_add>;

 public:
  /// The network's precision: that of x, y and every branch's input and output.
  using precision = NetworkPrecision;
  /// In, the input features.
  using input_features = In;
  /// The joined output features.
  using output_features = output<In>;
  /// A batch of x (or dx).
  using input_view = activation_view<precision, In, Space>;
  /// A batch of y (or dy).
  using output_view = activation_view<precision, output_features, Space>;
  static_assert([]<std::size_t... B>(std::index_sequence<B...>) {
    return (std::is_same_v<layer_input_precision<branch_type<B>>, precision> && ...);
  }(std::make_index_sequence<count>{}), "fusor: nn::branches: every branch takes the input in the network's precision "
                                        "(an embedding cannot start a branch)");

 private:
  template <std::size_t B>
  static constexpr index_t branch_bytes = detail::activation_bytes<precision, typename branch_type<B>::output_features>;
  static constexpr index_t input_bytes = detail::activation_bytes<precision, In>;
  static constexpr index_t own_kept_per_sample = []<std::size_t... B>(std::index_sequence<B...>) {
    return (index_t(0) + ... + branch_bytes<B>);
  }(std::make_index_sequence<count>{});
  // Where dy (join_add, but the last branch) or its slice (join_concat) is copied for a branch.
  static constexpr index_t dy_copy_bytes = []<std::size_t... B>(std::index_sequence<B...>) {
    return count == 1 ? index_t(0) : std::max({branch_bytes<B>...});
  }(std::make_index_sequence<count>{});
  using children = detail::inner_memory<branch_tuple>;

 public:
  /// Activations held from forward to backward, per sample: each branch's output and what its chain keeps.
  static constexpr index_t kept_bytes_per_sample = own_kept_per_sample + children::kept_per_sample;
  /// Memory used only inside one forward or backward call, per sample: one copy of dy (or of a slice), the input
  /// gradients of branches 1 on, and the largest scratch of a branch.
  static constexpr index_t scratch_bytes_per_sample =
      dy_copy_bytes + index_t(count - 1) * input_bytes + children::scratch_per_sample;
  /// Bytes of kept memory reserve(max_batch) takes (each region rounded to 256 bytes).
  static constexpr std::size_t kept_bytes(index_t max_batch) {
    return []<std::size_t... B>(std::index_sequence<B...>, [[maybe_unused]] index_t n) {
      return (std::size_t(0) + ... + detail::region_bytes(branch_bytes<B>, n));
    }(std::make_index_sequence<count>{}, max_batch) + children::kept_bytes(max_batch);
  }
  /// Bytes of scratch memory reserve(max_batch) takes (each region rounded to 256 bytes).
  static constexpr std::size_t scratch_bytes(index_t max_batch) {
    return detail::region_bytes(dy_copy_bytes, max_batch) + (count - 1) * detail::region_bytes(input_bytes, max_batch) +
           children::scratch_bytes(max_batch);
  }

  /// The descriptor's name(), for messages.
  static std::string name() { return branches::name(); }
  /// The branches' parameter specs in order, each name prefixed by its branch (`"1.0.weight"`: branch 1, its layer 0).
  static std::vector<parameter_spec> parameters() {
    return detail::prefixed_parameters<branch_tuple>::get();
  }
  /// Hands each branch its own consecutive part of the binding; throws fusor::error when the binding's count does not
  /// match the branches'.
  void bind(const parameter_binding<storage_t<precision>, Space>& binding) { detail::bind_inner(branches_, binding); }
  /// Before reserve(): the memory an enclosing composite provides (nullptr: own it).
  void place(std::byte* kept, std::byte* scratch) { memory_.place(kept, scratch); }
  /// Allocates on `stream` the kept and scratch blocks not placed, for up to max_batch samples, then places and
  /// reserves the branches.
  void reserve(index_t max_batch, stream_t stream) {
    memory_.reserve(kept_bytes(max_batch), scratch_bytes(max_batch), stream);
    detail::region_cursor kept = memory_.kept(), scratch = memory_.scratch();
    detail::for_each_index<count>([&]<std::size_t B>() {
      outputs_[B] = kept.take(detail::region_bytes(branch_bytes<B>, max_batch));
    });
    dy_copy_ = scratch.take(detail::region_bytes(dy_copy_bytes, max_batch));
    for (std::size_t b = 1; b < count; ++b)
      input_gradients_[b] = scratch.take(detail::region_bytes(input_bytes, max_batch));
    detail::for_each_index<count>([&]<std::size_t B>() {
      detail::reserve_inner(std::get<B>(branches_), kept, scratch.at, max_batch, stream);
    });
  }
  /// Gives each branch a seed derived from s and its branch index, passed on to its layers that take one (dropout).
  void seed(std::uint64_t s) { detail::seed_inner(branches_, s); }

  /// Runs every branch on x, one after the other, keeping their outputs, then joins them into y: one fused sum, or one
  /// copy per branch.
  template <class Executor>
  void forward(const input_view& x, const output_view& y, const run_mode& mode, const Executor& ex) {
    const index_t batch = x.extent(0);
    detail::for_each_index<count>([&]<std::size_t B>() {
      std::get<B>(branches_).forward(x, output_of<B>(batch), mode, ex);
    });
    if constexpr (add) {
      [&]<std::size_t... B>(std::index_sequence<B...>) {
        assign(y, (output_of<B>(batch) + ...), ex);
      }(std::make_index_sequence<count>{});
    } else {
      detail::for_each_index<count>([&]<std::size_t B>() {
        assign(column_block<B>(y), as_rows(output_of<B>(batch)), ex);
      });
    }
  }

  /// Runs every branch's backward from dy (its columns of dy for join_concat); dx, when wanted, is the sum of the
  /// branches' input gradients (one fused pass).
  template <class Executor>
  void backward(const input_view& x, const output_view&, const output_view& dy, const input_view& dx,
                const Executor& ex) {
    const index_t batch = x.extent(0);
    const bool want_dx = dx.data() != nullptr;
    detail::for_each_index<count>([&]<std::size_t B>() {
      using branch_output = typename branch_type<B>::output_view;
      branch_output dy_branch{};
      if constexpr ((add || count == 1) && B + 1 == count) {
        dy_branch = dy;  // the last branch may overwrite dy itself
      } else {
        dy_branch = detail::activation_at<precision, typename branch_type<B>::output_features, Space>(dy_copy_, batch);
        if constexpr (add) assign(dy_branch, dy, ex);
        else assign(as_rows(dy_branch), column_block<B>(dy), ex);
      }
      input_view dx_branch{};
      if (want_dx) dx_branch = B == 0 ? dx : at_input(input_gradients_[B], batch);
      std::get<B>(branches_).backward(x, output_of<B>(batch), dy_branch, dx_branch, ex);
    });
    if constexpr (count > 1) {
      if (want_dx)
        [&]<std::size_t... B>(std::index_sequence<B...>) {
          assign(dx, dx + (at_input(input_gradients_[B + 1], batch) + ...), ex);
        }(std::make_index_sequence<count - 1>{});
    }
  }

  /// Branch B's chain instance.
  template <std::size_t B>
  branch_type<B>& branch() { return std::get<B>(branches_); }
  /// Calls fn(chain instance) for each branch, in order.
  template <class Fn>
  void for_each_layer(Fn&& fn) {
    std::apply([&](auto&... branch) { (fn(branch), ...); }, branches_);
  }

 private:
  template <std::size_t B>
  typename branch_type<B>::output_view output_of(index_t batch) const {
    return detail::activation_at<precision, typename branch_type<B>::output_features, Space>(outputs_[B], batch);
  }
  static input_view at_input(std::byte* region, index_t batch) {
    return detail::activation_at<precision, In, Space>(region, batch);
  }
  // A batch of activations as rows of their last axis: [batch * positions, last].
  template <class View>
  static auto as_rows(const View& v) {
    constexpr std::size_t last = View::extents_type::static_extent(View::extents_type::rank() - 1);
    const index_t rows = v.size() / index_t(last);
    return view<typename View::precision, extents<index_t, dynamic, last>, row_major, Space>(v.data(), rows);
  }
  // Branch B's columns of y (or dy) seen as rows.
  template <std::size_t B>
  static auto column_block(const output_view& v) {
    constexpr std::size_t begin = []<std::size_t... C>(std::index_sequence<C...>) {
      return (std::size_t(0) + ... + detail::last_extent<typename branch_type<C>::output_features>);
    }(std::make_index_sequence<B>{});
    constexpr std::size_t width = detail::last_extent<typename branch_type<B>::output_features>;
    return slice<1>(as_rows(v), index_t(begin), index_t(begin + width));
  }

  branch_tuple branches_;
  detail::composite_memory<Space> memory_;
  std::array<std::byte*, count> outputs_{};
  std::array<std::byte*, count> input_gradients_{};  // branches 1 on
  std::byte* dy_copy_ = nullptr;
};

/// branches is a composite.
template <class Join, class... Branches>
inline constexpr bool is_composite_v<branches<Join, Branches...>> = true;

}  // namespace fusor::nn
