// fusor/optim/adamw.hpp — AdamW (decoupled weight decay), as torch.optim.AdamW
// defines it, in ONE fused pass over a flat parameter buffer: gradients, both
// moments, fp32 master weights and parameters are read and written together.
//
// With g = grads * gradient_multiplier, t = step + 1 (steps applied so far,
// plus this one) and w the master weights (or the fp32 parameters):
//   w *= 1 - lr * weight_decay
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + epsilon)
// 16-bit parameters then receive w rounded to their precision. On a skipped
// step (Inf/NaN gradients) every value is written back unchanged.
//
// The three per-step factors (lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t),
// 1 - lr * weight_decay) are computed once per step by a one-thread task into
// this optimizer's own device memory, from the device step count and learning
// rate, so the pass does not evaluate pow() per element: a step is that task
// and the one pass.
#pragma once

#include <type_traits>

#include <cuda/std/cmath>

#include "fusor/core/copy.hpp"
#include "fusor/core/error.hpp"
#include "fusor/exec/assign.hpp"
#include "fusor/expr/operators.hpp"
#include "fusor/optim/flat_state.hpp"
#include "fusor/optim/scalar_operand.hpp"
#include "fusor/optim/state_domain.hpp"
#include "fusor/optim/step_scalars.hpp"

namespace fusor::optim {

/// AdamW's hyperparameters (torch.optim.AdamW's defaults); the learning rate comes from the step's schedule.
struct adamw_options {
  /// Decay rate of the first moment (the running mean of the gradients), in [0, 1).
  float beta1 = 0.9f;
  /// Decay rate of the second moment (the running mean of the squared gradients), in [0, 1).
  float beta2 = 0.999f;
  /// Added to the denominator of the update for numerical stability; >= 0.
  float epsilon = 1e-8f;
  /// Decoupled weight decay: each step first multiplies the weights by 1 - lr * weight_decay; >= 0.
  float weight_decay = 0.01f;
};

namespace detail {
// [0] lr / (1 - beta1^t)   [1] 1 / sqrt(1 - beta2^t)   [2] 1 - lr * weight_decay
struct adamw_factors_task {
  const step_values* values;
  float* factors;
  adamw_options options;
  FUSOR_HOST_DEVICE void operator()() const {
    const double t = double(values->step + 1);
    const double learning_rate = values->learning_rate;
    const double correction1 = 1.0 - ::cuda::std::pow(double(options.beta1), t);
    const double correction2 = 1.0 - ::cuda::std::pow(double(options.beta2), t);
    factors[0] = float(learning_rate / correction1);
    factors[1] = float(1.0 / ::cuda::std::sqrt(correction2));
    factors[2] = float(1.0 - learning_rate * double(options.weight_decay));
  }
};
}  // namespace detail

/// AdamW over one flat parameter buffer of precision `Precision`, as one fused pass per step; its moments (and,
/// for 16-bit parameters, fp32 master weights) live in `Space`.
template <class Precision, class Space = host_space>
class adamw {
 public:
  /// How the parameters' elements are stored (e.g. __nv_bfloat16 for bf16).
  using storage_type = typename state_traits<Precision>::storage_type;
  /// Element type of the moments and master weights: the precision's compute type (fp32 for bf16 and fp16).
  using state_type = typename state_traits<Precision>::state_type;
  /// A flat view of the parameters.
  using parameter_view = flat_view<Precision, Space>;
  /// A flat view of one state tensor (a moment or the master weights).
  using state_view = flat_view<state_type, Space>;
  /// Whether the parameters are stored narrower than the state, so the optimizer keeps fp32 master weights.
  static constexpr bool has_master_weights = state_traits<Precision>::has_master_weights;

  /// Zero state for `parameter_count` parameters, allocated on `stream`. Throws fusor::error for a negative
  /// count or options out of range (0 <= beta1, beta2 < 1; epsilon, weight_decay >= 0).
  explicit adamw(index_t parameter_count, adamw_options options = {}, stream_t stream = {})
      : options_(options), count_(parameter_count) {
    if (parameter_count < 0) throw error("fusor: adamw needs a parameter count >= 0");
    if (!(options.beta1 >= 0.0f && options.beta1 < 1.0f) || !(options.beta2 >= 0.0f && options.beta2 < 1.0f) ||
        !(options.epsilon >= 0.0f) || !(options.weight_decay >= 0.0f))
      throw error("fusor: adamw needs 0 <= beta1, beta2 < 1, epsilon >= 0 and weight_decay >= 0");
    exp_avg_ = detail::zero_tensor<state_type, Space>(parameter_count, stream);
    exp_avg_sq_ = detail::zero_tensor<state_type, Space>(parameter_count, stream);
    if constexpr (has_master_weights) master_ = detail::zero_tensor<state_type, Space>(parameter_count, stream);
    factors_ = detail::zero_tensor<float, Space>(3, stream);
  }

  /// Master weights = params (once, after the parameters are initialised or loaded).
  template <flat_buffer_of<typename state_traits<Precision>::storage_type> V, class Ex>
  void initialize(const V& params, const Ex& executor);

  /// One AdamW step over every parameter, reading learning rate, gradient multiplier, skip flag and step count
  /// from `scalars`. Throws shape_error when parameters or gradients are not parameter_count() long.
  template <flat_buffer_of<typename state_traits<Precision>::storage_type> V, class G, class Ex>
  void step(const V& parameters, const G& grads, const step_scalars<Space>& scalars, const Ex& executor);
  /// A step in parts (ZeRO updates this rank's chunk of each bucket where it
  /// lies in the network's buffer): begin_step once, then step_part for state
  /// elements [first, first + n) with n parameters and gradients, any order.
  /// begin_step computes the step's bias-correction and decay factors from `scalars`.
  template <class Ex>
  void begin_step(const step_scalars<Space>& scalars, const Ex& executor);
  /// Updates state elements [first, first + n) and the n `parameters` from n `grads`, after begin_step.
  /// Throws shape_error when the part does not lie inside the state or the sizes differ.
  template <flat_buffer_of<typename state_traits<Precision>::storage_type> V, class G, class Ex>
  void step_part(index_t first, const V& parameters, const G& grads, const step_scalars<Space>& scalars,
                 const Ex& executor);

  /// The state a checkpoint keeps: fn(name, view), or fn(name, view, state_domain) where fn takes the domain;
  /// names stable.
  template <class Fn>
  void for_each_state(Fn&& fn) const {
    detail::visit_state(fn, "exp_avg", exp_avg_.view(), state_domain::finite);
    detail::visit_state(fn, "exp_avg_sq", exp_avg_sq_.view(), state_domain::non_negative);
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
  const adamw_options& options() const { return options_; }

 private:
  // w: the weights the update reads; weights_out: where the new ones go (w itself,
  // or the master weights and, rounded, the parameters).
  template <class W, class Out, class G, class Ex>
  void update(index_t first, const W& w, const Out& weights_out, const G& grads, const step_scalars<Space>& scalars,
              const Ex& executor) {
    const auto skip = scalar(scalars.skip());
    const auto step_size = scalar<float, Space>(factors_.data() + 0);
    const auto inverse_sqrt_correction2 = scalar<float, Space>(factors_.data() + 1);
    const auto decay = scalar<float, Space>(factors_.data() + 2);
    const auto g = grads * scalar(scalars.gradient_multiplier());
    const auto m = detail::state_part(exp_avg_, first, w.size());
    const auto v = detail::state_part(exp_avg_sq_, first, w.size());
    const auto m_new = options_.beta1 * m + (1.0f - options_.beta1) * g;
    const auto v_new = options_.beta2 * v + (1.0f - options_.beta2) * (g * g);
    const auto w_new = where(skip, w,
                             w * decay - step_size * m_new / (sqrt(v_new) * inverse_sqrt_correction2 + options_.epsilon));
    assign_many(executor, out(m, where(skip, m, m_new)), out(v, where(skip, v, v_new)), out(weights_out, w_new));
  }

  adamw_options options_;
  index_t count_;
  flat_tensor<state_type, Space> exp_avg_;
  flat_tensor<state_type, Space> exp_avg_sq_;
  flat_tensor<state_type, Space> master_;
  flat_tensor<float, Space> factors_;
};

// The members that launch work, defined outside the class so that they are
// not inline: an `extern template` (below) then keeps a program from
// compiling them again.
template <class Precision, class Space>
template <flat_buffer_of<typename state_traits<Precision>::storage_type> V, class Ex>
void adamw<Precision, Space>::initialize(const V& params, const Ex& executor) {
  detail::check_size("adamw", "parameters", count_, as_view(params).size());
  if constexpr (has_master_weights) assign(master_.view(), as_view(params), executor);
}
template <class Precision, class Space>
template <flat_buffer_of<typename state_traits<Precision>::storage_type> V, class G, class Ex>
void adamw<Precision, Space>::step(const V& parameters, const G& grads, const step_scalars<Space>& scalars,
                                   const Ex& executor) {
  detail::check_size("adamw", "parameters", count_, as_view(parameters).size());
  detail::check_size("adamw", "gradients", count_, as_view(grads).size());
  begin_step(scalars, executor);
  step_part(0, parameters, grads, scalars, executor);
}
template <class Precision, class Space>
template <class Ex>
void adamw<Precision, Space>::begin_step(const step_scalars<Space>& scalars, const Ex& executor) {
  run_task(detail::adamw_factors_task{scalars.values(), factors_.data(), options_}, executor);
}
template <class Precision, class Space>
template <flat_buffer_of<typename state_traits<Precision>::storage_type> V, class G, class Ex>
void adamw<Precision, Space>::step_part(index_t first, const V& parameters, const G& grads,
                                        const step_scalars<Space>& scalars, const Ex& executor) {
  const auto& params = as_view(parameters);
  const index_t n = params.size();
  detail::check_part("adamw", first, n, count_, as_view(grads).size());
  if constexpr (has_master_weights) {
    const auto master = detail::state_part(master_, first, n);
    using destination = master_and_parameters<state_view, std::remove_cvref_t<decltype(params)>>;
    update(first, master, destination{master, params}, as_view(grads), scalars, executor);
  } else {
    update(first, params, params, as_view(grads), scalars, executor);
  }
}

// The instances a trainer of fp32 or bf16 parameter groups uses (flat views
// of the group's values and gradients), compiled once: the host's in
// fusor::runtime (src/optim.cpp), the GPU's in fusor::cuda_runtime
// (src/cuda/optim.cu). PREFIX is `extern` for the declarations here.
#define FUSOR_ADAMW_INSTANCES(PREFIX, E, S, Executor)                                                                 \
  PREFIX template void adamw<E, S>::initialize<flat_view<E, S>, Executor>(const flat_view<E, S>&, const Executor&);   \
  PREFIX template void adamw<E, S>::step<flat_view<E, S>, flat_view<E, S>, Executor>(                                \
      const flat_view<E, S>&, const flat_view<E, S>&, const step_scalars<S>&, const Executor&);                       \
  PREFIX template void adamw<E, S>::begin_step<Executor>(const step_scalars<S>&, const Executor&);                    \
  PREFIX template void adamw<E, S>::step_part<flat_view<E, S>, flat_view<E, S>, Executor>(                           \
      index_t, const flat_view<E, S>&, const flat_view<E, S>&, const step_scalars<S>&, const Executor&)
#define FUSOR_ADAMW_HOST_INSTANCES(PREFIX) FUSOR_ADAMW_INSTANCES(PREFIX, float, host_space, host_executor)
#define FUSOR_ADAMW_CUDA_INSTANCES(PREFIX)                           \
  FUSOR_ADAMW_INSTANCES(PREFIX, float, device_space, cuda_executor); \
  FUSOR_ADAMW_INSTANCES(PREFIX, __nv_bfloat16, device_space, cuda_executor)
#if defined(FUSOR_SEPARATE_COMPILATION)
FUSOR_ADAMW_HOST_INSTANCES(extern);
#endif
#if FUSOR_CUDA_PRECOMPILED
FUSOR_ADAMW_CUDA_INSTANCES(extern);
#endif

}  // namespace fusor::optim
