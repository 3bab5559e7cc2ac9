// SGD against torch.optim.SGD's documented algorithm in fp64: plain, momentum,
// dampening, Nesterov, weight decay; fp32 parameters updated in place, and
// bf16/fp16 parameters whose fp32 master weights follow the reference and
// whose values are exactly the master's rounding. One launch per step.
#include <string>

#include "optim/optim_support.hpp"

using namespace optim_test;

namespace {

struct sgd_case {
  const char* name;
  optim::sgd_options options;
};

const sgd_case sgd_cases[] = {
    {"plain", {}},
    {"weight decay", {0.0f, 0.0f, 0.05f, false}},
    {"momentum", {0.9f, 0.0f, 0.0f, false}},
    {"momentum + dampening", {0.9f, 0.3f, 0.0f, false}},
    {"Nesterov", {0.9f, 0.0f, 0.0f, true}},
    {"momentum + dampening + weight decay", {0.8f, 0.1f, 0.02f, false}},
    {"Nesterov + weight decay", {0.7f, 0.0f, 0.03f, true}},
};

template <class P>
void sgd_against_reference(const sgd_case& c) {
  const index_t n = 4099;  // not a multiple of any vector width: the tail runs too
  const int steps = 6;
  const auto schedule = optim::learning_rate_schedule::warmup_cosine(0.1f, 2, 5, 0.01f);
  const auto host_params = random_flat<P>(n, 11);
  auto params = to_space(host_params);
  flat_space<P> grads(n);
  executor ex{};
  optim::update_controller<space> controller(schedule, {}, {}, ex_stream(ex));
  optim::sgd<P, space> optimizer(n, c.options);
  optimizer.initialize(params.view(), ex);
  // The first step must not read the momentum buffer: poison it.
  optimizer.for_each_state([](const char* name, const auto& state) {
    if (std::string(name) == "momentum") poison(state);
  });

  sgd_reference reference{c.options, as_doubles_host(host_params), {}};
  for (int s = 0; s < steps; ++s) {
    const auto host_grads = random_flat<P>(n, std::uint32_t(100 + s), -2.0, 2.0);
    copy(grads, host_grads);
    const auto before = launches();
    controller.begin_step(ex);
    controller.prepare_update(ex);
    const auto optimizer_launches = launches();
    optimizer.step(params.view(), grads.view(), controller.scalars(), ex);
    if (counts_launches) CHECK(launches() - optimizer_launches == 1);
    controller.finish_step(ex);
    if (counts_launches) CHECK(launches() - before == 4);
    finish(ex);
    reference.step(as_doubles_host(host_grads), warmup_cosine_reference(0.1, 2, 5, 0.01, s));
  }
  const std::string what = std::string("sgd ") + c.name + " " + precision_name<P>();
  CHECK(controller.scalars().read_step() == steps);
  if constexpr (optim::sgd<P, space>::has_master_weights) {
    const auto master = as_doubles(optimizer.master_weights());
    check_close(master, reference.w, fp32_tolerance, what + " master weights");
    check_equal(as_doubles(params), rounded_to<P>(master), what + " parameters (the master's rounding)");
  } else {
    check_close(as_doubles(params), reference.w, fp32_tolerance, what + " parameters");
  }
  if (c.options.momentum != 0.0f) {
    int buffers = 0;
    optimizer.for_each_state([&](const char* name, const auto& state) {
      if (std::string(name) != "momentum") return;
      ++buffers;
      check_close(as_doubles(state), reference.b, fp32_tolerance, what + " momentum");
    });
    CHECK(buffers == 1);
  }
}

}  // namespace

FUSOR_TEST_CASE("sgd: fp32 parameters against torch.optim.SGD's algorithm") {
  for (const auto& c : sgd_cases) sgd_against_reference<float>(c);
}

FUSOR_TEST_CASE("sgd: bf16 and fp16 parameters keep fp32 master weights") {
  for (const auto& c : sgd_cases) {
    sgd_against_reference<bf16>(c);
    sgd_against_reference<fp16>(c);
  }
}

FUSOR_TEST_CASE("sgd: a step in parts equals the whole step (ZeRO's in-place update)") {
  check_step_in_parts<optim::sgd, float>(optim::sgd_options{.momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true});
  check_step_in_parts<optim::sgd, float16>(optim::sgd_options{.momentum = 0.5f});
}

FUSOR_TEST_CASE("sgd: state names, sizes and option errors") {
  optim::sgd<float, space> plain(10);
  int states = 0;
  plain.for_each_state([&](const char*, const auto&) { ++states; });
  CHECK(states == 0);  // no momentum, no master weights: no state at all
  optim::sgd<bfloat16, space> with_momentum(10, {0.9f});
  std::string names;
  with_momentum.for_each_state([&](const char* name, const auto& state) {
    names += std::string(name) + " ";
    CHECK(state.size() == 10);
  });
  CHECK(names == "momentum master ");
  CHECK(with_momentum.parameter_count() == 10);
  CHECK(with_momentum.options().momentum == 0.9f);

  expect_error<fusor::error>([] { optim::sgd<float, space>(10, {0.0f, 0.0f, 0.0f, true}); }, {"Nesterov"});
  expect_error<fusor::error>([] { optim::sgd<float, space>(10, {0.9f, 0.5f, 0.0f, true}); }, {"dampening"});
  expect_error<fusor::error>([] { optim::sgd<float, space>(10, {-0.1f}); }, {"momentum"});

  flat_space<float> params(11), grads(10);
  executor ex{};
  optim::update_controller<space> controller(optim::learning_rate_schedule::constant(0.1f), {}, {}, ex_stream(ex));
  expect_error<fusor::shape_error>([&] { plain.step(params.view(), grads.view(), controller.scalars(), ex); },
                                   {"[11]", "[10]"});
}
