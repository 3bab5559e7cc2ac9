// AdamW against torch.optim.AdamW's documented algorithm in fp64 (decoupled
// weight decay, bias corrections with t = steps applied + 1): fp32 parameters,
// and bf16/fp16 parameters with fp32 master weights (the parameters are the
// master's rounding). Two launches per step: the per-step factors and the pass.
#include <string>

#include "optim/optim_support.hpp"

using namespace optim_test;

namespace {

struct adamw_case {
  const char* name;
  optim::adamw_options options;
};

const adamw_case adamw_cases[] = {
    {"defaults", {}},
    {"no weight decay", {0.9f, 0.999f, 1e-8f, 0.0f}},
    {"strong decay, other betas", {0.8f, 0.95f, 1e-6f, 0.1f}},
    {"large epsilon", {0.9f, 0.99f, 1e-2f, 0.01f}},
};

template <class P>
void adamw_against_reference(const adamw_case& c) {
  const index_t n = 3001;
  const int steps = 7;
  const auto host_params = random_flat<P>(n, 21);
  auto params = to_space(host_params);
  flat_space<P> grads(n);
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::warmup_cosine(0.02f, 3, 6), {}, {},
                                             ex_stream(ex));
  optim::adamw<P, space> optimizer(n, c.options);
  optimizer.initialize(params.view(), ex);

  adamw_reference reference{c.options, as_doubles_host(host_params), {}, {}};
  for (int s = 0; s < steps; ++s) {
    const auto host_grads = random_flat<P>(n, std::uint32_t(200 + s), -2.0, 2.0);
    copy(grads, host_grads);
    controller.begin_step(ex);
    controller.accumulate_gradient_norm(grads, ex);
    controller.prepare_update(ex);
    const auto before = launches();
    optimizer.step(params.view(), grads.view(), controller.scalars(), ex);
    if (counts_launches) CHECK(launches() - before == 2);
    controller.finish_step(ex);
    finish(ex);
    reference.step(as_doubles_host(host_grads), warmup_cosine_reference(0.02, 3, 6, 0.0, s));
  }
  const std::string what = std::string("adamw ") + c.name + " " + precision_name<P>();
  CHECK(controller.scalars().read_step() == steps);
  if constexpr (optim::adamw<P, space>::has_master_weights) {
    const auto master = as_doubles(optimizer.master_weights());
    check_close(master, reference.w, fp32_tolerance, what + " master weights");
    check_equal(as_doubles(params), rounded_to<P>(master), what + " parameters (the master's rounding)");
  } else {
    check_close(as_doubles(params), reference.w, fp32_tolerance, what + " parameters");
  }
  std::string names;
  optimizer.for_each_state([&](const char* name, const auto& state) {
    names += std::string(name) + " ";
    if (std::string(name) == "exp_avg") check_close(as_doubles(state), reference.m, fp32_tolerance, what + " exp_avg");
    if (std::string(name) == "exp_avg_sq")
      check_close(as_doubles(state), reference.v, fp32_tolerance, what + " exp_avg_sq");
  });
  CHECK(names == (optim::adamw<P, space>::has_master_weights ? "exp_avg exp_avg_sq master " : "exp_avg exp_avg_sq "));
  // What a checkpoint loader refuses: the mean of squares alone is never negative.
  std::string domains;
  optimizer.for_each_state([&](const char* name, const auto&, optim::state_domain d) {
    domains += std::string(name) + ":" + optim::describe(d) + " ";
  });
  CHECK(domains == std::string("exp_avg:finite exp_avg_sq:finite and 0 or more ") +
                       (optim::adamw<P, space>::has_master_weights ? "master:finite " : ""));
}

}  // namespace

FUSOR_TEST_CASE("adamw: fp32 parameters against torch.optim.AdamW's algorithm") {
  for (const auto& c : adamw_cases) adamw_against_reference<float>(c);
}

FUSOR_TEST_CASE("adamw: bf16 and fp16 parameters keep fp32 master weights") {
  for (const auto& c : adamw_cases) {
    adamw_against_reference<bfloat16>(c);
    adamw_against_reference<float16>(c);
  }
}

FUSOR_TEST_CASE("adamw: a step in parts equals the whole step (ZeRO's in-place update)") {
  check_step_in_parts<optim::adamw, float>(optim::adamw_options{.weight_decay = 0.1f});
  check_step_in_parts<optim::adamw, bfloat16>(optim::adamw_options{});
}

FUSOR_TEST_CASE("adamw: options and sizes are checked") {
  expect_error<fusor::error>([] { optim::adamw<float, space>(10, {1.0f}); }, {"beta1"});
  expect_error<fusor::error>([] { optim::adamw<float, space>(10, {0.9f, 0.999f, -1.0f}); }, {"epsilon"});
  optim::adamw<float, space> optimizer(10);
  CHECK(optimizer.parameter_count() == 10);
  CHECK(optimizer.options().weight_decay == 0.01f);
  flat_space<float> params(10), grads(12);
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.1f), {}, {}, ex_stream(ex));
  expect_error<fusor::shape_error>([&] { optimizer.step(params.view(), grads.view(), controller.scalars(), ex); },
                                   {"[12]", "[10]"});
}
