// fusor/optim/sgd.hpp — stochastic gradient descent with momentum, dampening,
// Nesterov momentum and weight decay, as torch.optim.SGD defines them, in ONE
// fused pass over a flat parameter buffer: gradients, momentum, fp32 master
// weights and parameters are read and written together, element by element.
//
// With g = grads * gradient_multiplier + weight_decay * w (w: the master
// weights, or the parameters themselves when they are fp32):
//   momentum == 0:  w -= lr * g
//   otherwise:      b = (first step) ? g : momentum * b + (1 - dampening) * g
//                   w -= lr * (nesterov ? g + momentum * b : b)
// 16-bit parameters then receive w rounded to their precision. The learning
// rate, gradient multiplier, skip flag and step count come from the
// step_scalars in memory; on a skipped step (Inf/NaN gradients) every value is
// written back unchanged, and "first step" means the first step applied.
#pragma once

#include <type_traits>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/optim/flat_state.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/state_domain.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

/// SGD's hyperparameters (torch.optim.SGD's defaults); the learning rate comes from the step's schedule.
struct sgd_options {
  /// Momentum factor, >= 0; 0 keeps no momentum buffer.
  float momentum = 0.0f;
  /// Dampening of the gradient's share of the momentum, in [0, 1].
  float dampening = 0.0f;
  /// L2 penalty: weight_decay * w is added to the gradient; >= 0.
  float weight_decay = 0.0f;
  /// Nesterov momentum (needs momentum > 0 and dampening 0).
  bool nesterov = false;
};

/// SGD with momentum over one flat parameter buffer of precision `Precision`, as one fused pass per step; its
/// momentum (and, for 16-bit parameters, fp32 master weights) live in `Space`.
template <class Precision, class Space = host_space>
class sgd {
 public:
  /// How the parameters' elements are stored (e.g. __nv_bfloat16 for bf16).
  using storage_type = typename state_traits<Precision>::storage_type;
  /// Element type of the momentum and master weights: the precision's compute type (fp32 for bf16 and fp16).
  using state_type = typename state_traits<Precision>::state_type;
  /// A flat view of the parameters.
  using parameter_view = flat_view<Precision, Space>;
  /// A flat view of one state tensor (the momentum or the master weights).
  using state_view = flat_view<state_type, Space>;
  /// Whether the parameters are stored narrower than the state, so the optimizer keeps fp32 master weights.
  static constexpr bool has_master_weights = state_traits<Precision>::has_master_weights;

  /// Zero state for `parameter_count` parameters, allocated on `stream`. Throws fusor::error for a negative
  /// count or options out of range (momentum, weight_decay >= 0; 0 <= dampening <= 1; Nesterov needs
  /// momentum > 0 and dampening 0).
  explicit sgd(index_t parameter_count, sgd_options options = {}, stream_t stream = {})
      : options_(options), count_(parameter_count) {
    if (parameter_count < 0) throw error("fusor: sgd needs a parameter count >= 0");
    if (!(options.momentum >= 0.0f) || !(options.weight_decay >= 0.0f) || !(options.dampening >= 0.0f) ||
        !(options.dampening <= 1.0f))
      throw error("fusor: sgd needs momentum >= 0, weight_decay >= 0 and 0 <= dampening <= 1");
    if (options.nesterov && (options.momentum == 0.0f || options.dampening != 0.0f))
      throw error("fusor: Nesterov momentum needs momentum > 0 and dampening 0 (as in torch.optim.SGD)");
    if (options.momentum != 0.0f) momentum_ = detail::zero_tensor<state_type, Space>(parameter_count, stream);
    if constexpr (has_master_weights) master_ = detail::zero_tensor<state_type, Space>(parameter_count, stream);
  }

  /// Master weights = params (once, after the parameters are initialised or loaded).
  template <flat_buffer_of<storage_type> V, class Ex>
  void initialize(const V& params, const Ex& executor) {
    detail::check_size("sgd", "parameters", count_, as_view(params).size());
    if constexpr (has_master_weights) assign(master_.view(), as_view(params), executor);
  }

  /// One SGD step over every parameter, reading learning rate, gradient multiplier, skip flag and step count
  /// from `scalars`. Throws shape_error when parameters or gradients are not parameter_count() long.
  template <flat_buffer_of<storage_type> V, class G, class Ex>
  void step(const V& parameters, const G& grads, const step_scalars<Space>& scalars, const Ex& executor) {
    detail::check_size("sgd", "parameters", count_, as_view(parameters).size());
    detail::check_size("sgd", "gradients", count_, as_view(grads).size());
    step_part(0, parameters, grads, scalars, executor);
  }
  /// A step in parts (as adamw's): begin_step once, then step_part for state
  /// elements [first, first + n) with n parameters and gradients. For SGD begin_step does nothing.
  template <class Ex>
  void begin_step(const step_scalars<Space>&, const Ex&) {}
  /// Updates state elements [first, first + n) and the n `parameters` from n `grads`, after begin_step.
  /// Throws shape_error when the part does not lie inside the state or the sizes differ.
  template <flat_buffer_of<storage_type> V, class G, class Ex>
  void step_part(index_t first, const V& parameters, const G& grads, const step_scalars<Space>& scalars,
                 const Ex& executor) {
    const auto& params = as_view(parameters);
    const index_t n = params.size();
    detail::check_part("sgd", first, n, count_, as_view(grads).size());
    if constexpr (has_master_weights) {
      const auto master = detail::state_part(master_, first, n);
      using destination = master_and_parameters<state_view, std::remove_cvref_t<decltype(params)>>;
      update(first, master, destination{master, params}, as_view(grads), scalars, executor);
    } else {
      update(first, params, params, as_view(grads), scalars, executor);
    }
  }

  /// The state a checkpoint keeps: fn(name, view), or fn(name, view, state_domain) where fn takes the domain;
  /// names stable.
  template <class Fn>
  void for_each_state(Fn&& fn) const {
    if (momentum_.size() != 0) detail::visit_state(fn, "momentum", momentum_.view(), state_domain::finite);
    if constexpr (has_master_weights) detail::visit_state(fn, "master", master_.view(), state_domain::finite);
  }
  /// The fp32 master copy of the parameters, which the update reads and writes (16-bit parameters only).
  state_view master_weights() const
    requires has_master_weights
  {
    return master_.view();
  }
  /// How many parameters the optimizer was made for.
  index_t parameter_count() const { return count_; }
  /// The hyperparameters it was made with.
  const sgd_options& options() const { return options_; }

 private:
  // w: the weights the update reads; weights_out: where the new ones go (w itself,
  // or the master weights and, rounded, the parameters).
  template <class W, class Out, class G, class Ex>
  void update(index_t first, const W& w, const Out& weights_out, const G& grads, const step_scalars<Space>& scalars,
              const Ex& executor) {
    const auto learning_rate = scalar(scalars.learning_rate());
    const auto skip = scalar(scalars.skip());
    const auto g = grads * scalar(scalars.gradient_multiplier()) + options_.weight_decay * w;
    if (momentum_.size() == 0) {
      assign(weights_out, where(skip, w, w - learning_rate * g), executor);
    } else {
      const auto b = detail::state_part(momentum_, first, w.size());
      const auto b_new = where(scalar(scalars.step()) == 0, g, options_.momentum * b + (1.0f - options_.dampening) * g);
      // Nesterov: g + momentum * b; otherwise 0 * g + 1 * b (exact): one kernel for both.
      const float on_gradient = options_.nesterov ? 1.0f : 0.0f;
      const float on_momentum = options_.nesterov ? options_.momentum : 1.0f;
      const auto w_new = where(skip, w, w - learning_rate * (on_gradient * g + on_momentum * b_new));
      assign_many(executor, out(b, where(skip, b, b_new)), out(weights_out, w_new));
    }
  }

  sgd_options options_;
  index_t count_;
  flat_tensor<state_type, Space> momentum_;
  flat_tensor<state_type, Space> master_;
};

}  // namespace fusor::optim
