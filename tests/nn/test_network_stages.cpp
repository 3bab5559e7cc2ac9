// What pipeline and tensor parallelism build on, under every executor: a network
// of a layer range (a stage) computes exactly what those layers compute inside
// the whole network, forward and backward, and draws the same parameters; the
// backward hook reports every layer, last first; networks sharing parameters
// see one set; a sharded parameter is initialised as its slice of the full one.
#include <cstddef>
#include <vector>

#include "support/fusor_test.hpp"

#include <fusor/nn/linear.hpp>
#include <fusor/nn/network.hpp>

// A namespace of its own: the suite compiles as one translation unit (tests/CMakeLists.txt).
namespace test_network_stages {

using namespace fusor;
using namespace fusor_test;

namespace {
using mlp = nn::sequential<nn::features<12>, nn::linear<12, 16, nn::relu>, nn::linear<16, 8, nn::gelu_tanh>,
                           nn::linear<8, 8, nn::relu>, nn::linear<8, 5>>;
using matrix = dextents<index_t, 2>;

void check_same(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i);
    CHECK(close(got[i], want[i], 1e-6));
  }
}
}  // namespace

FUSOR_TEST_CASE("network stages: layers [0, 2) then [2, 4) equal the whole network, forward and backward") {
  executor ex{};
  constexpr index_t batch = 6;
  nn::network<mlp, fp32, space> whole(batch, {.seed = 7});
  nn::network<mlp, fp32, space> front(batch, {.seed = 7, .layers = {0, 2}});
  nn::network<mlp, fp32, space> back(batch, {.seed = 7, .layers = {2, 4}});
  CHECK(front.parameter_count() + back.parameter_count() == whole.parameter_count());
  CHECK(front.layers().first == 0);
  CHECK(back.layers().last == 4);

  host_tensor<float, matrix> x_host(batch, 12), dy_host(batch, 5);
  fill_random(x_host.view(), 11);
  fill_random(dy_host.view(), 12);
  const auto x = to_space(x_host);
  const auto dy = to_space(dy_host);

  const auto y = whole.forward(x, ex);
  copy(whole.output_gradient(), dy.view());
  std::vector<std::size_t> order;
  whole.backward(ex, {}, [&](std::size_t layer) { order.push_back(layer); });
  CHECK(order == std::vector<std::size_t>{3, 2, 1, 0});

  // The front stage's output travels (here: a copy) into the back stage's input.
  CHECK(front.forward(x, ex).data() == nullptr);  // its output is not the network's
  space_tensor<float, matrix> boundary(batch, 8), boundary_gradient(batch, 8);
  poison(boundary.view());
  front.with_stage_output([&](const auto& out) { copy(nn::flat_view<float, space>(boundary.data(), out.size()), out); });
  back.with_stage_input(batch, [&](const auto& in) { copy(in, nn::flat_view<float, space>(boundary.data(), in.size())); });
  back.forward_stage(ex);
  finish(ex);
  check_same(as_doubles(back.output()), as_doubles(y), "output");

  copy(back.output_gradient(), dy.view());
  order.clear();
  back.backward(ex, {}, [&](std::size_t layer) { order.push_back(layer); });
  CHECK(order == std::vector<std::size_t>{3, 2});
  poison(boundary_gradient.view());
  back.with_stage_input_gradient(
      [&](const auto& g) { copy(nn::flat_view<float, space>(boundary_gradient.data(), g.size()), g); });
  front.with_stage_output_gradient(
      [&](const auto& g) { copy(g, nn::flat_view<float, space>(boundary_gradient.data(), g.size())); });
  front.backward(ex);
  finish(ex);

  // Every parameter and gradient of a stage is the whole network's of the same name.
  auto compare_stage = [&](auto& stage) {
    stage.for_each_parameter([&](const nn::parameter_slot& slot, const auto& values, const auto& gradients) {
      bool found = false;
      whole.for_each_parameter([&](const nn::parameter_slot& w, const auto& wv, const auto& wg) {
        if (w.name != slot.name) return;
        found = true;
        check_same(as_doubles(values), as_doubles(wv), slot.name.c_str());
        check_same(as_doubles(gradients), as_doubles(wg), slot.name.c_str());
      });
      CHECK(found);
    });
  };
  compare_stage(front);
  compare_stage(back);
  CHECK(front.parameter_range<float>(1).second == front.group<float>().size());
  CHECK(back.parameter_range<float>(0) == std::pair<index_t, index_t>{0, 0});
}

FUSOR_TEST_CASE("network stages: misuse is refused with the reason") {
  executor ex{};
  nn::network<mlp, fp32, space> back(4, {.seed = 1, .layers = {2, 4}});
  space_tensor<float, matrix> x(4, 12);
  expect_error<error>([&] { back.forward(x, ex); }, {"from 2 on", "with_stage_input"});
  expect_error<error>([&] { back.forward_stage(ex); }, {"with_stage_input first"});
  nn::network<mlp, fp32, space> front(4, {.seed = 1, .layers = {0, 3}});
  expect_error<error>([&] { (void)front.output_gradient(); }, {"ends before the last layer", "3 of 4"});
  expect_error<error>([&] { front.with_stage_input_gradient([](const auto&) {}); }, {"first stage"});
  expect_error<error>([&] { nn::network<mlp, fp32, space>(4, {.layers = {3, 3}}); }, {"[3, 3)", "4 layers"});
  expect_error<error>([&] { nn::network<mlp, fp32, space>(4, {.layers = {0, 3}}, back); }, {"another layer range"});
}

FUSOR_TEST_CASE("network: networks sharing parameters keep their own activations") {
  executor ex{};
  constexpr index_t batch = 5;
  nn::network<mlp, fp32, space> owner(batch, {.seed = 3});
  nn::network<mlp, fp32, space> second(batch, {.seed = 99}, owner);  // the seed is the owner's
  CHECK(second.group<float>().values().data() == owner.group<float>().values().data());
  CHECK(second.group<float>().gradients().data() == owner.group<float>().gradients().data());
  CHECK(second.seed() == 3);

  host_tensor<float, matrix> a_host(batch, 12), b_host(batch, 12);
  fill_random(a_host.view(), 21);
  fill_random(b_host.view(), 22);
  const auto a = to_space(a_host);
  const auto b = to_space(b_host);
  const auto ya = owner.forward(a, ex);
  const auto yb = second.forward(b, ex);  // does not disturb owner's activations
  finish(ex);
  const std::vector<double> kept = as_doubles(ya);
  nn::network<mlp, fp32, space> fresh(batch, {.seed = 3});
  check_same(kept, as_doubles(fresh.forward(a, ex)), "owner's output");
  check_same(as_doubles(yb), as_doubles(fresh.forward(b, ex)), "second's output");
}

namespace {
// A layer whose one parameter is row slice `Index` of 3 of a [6, 4] matrix.
template <int Index>
struct sliced_layer {
  template <class F>
  static constexpr bool accepts = std::is_same_v<F, nn::features<4>>;
  using expected_input = nn::features<4>;
  template <class F>
  using output = nn::features<4>;
  template <class F, class NetworkPrecision, class Space>
  struct instance {
    using precision = NetworkPrecision;
    using input_features = nn::features<4>;
    using output_features = nn::features<4>;
    static std::vector<nn::parameter_spec> parameters() {
      return {{"weight", {2, 4}, nn::initializer::uniform_fan_in(4), {.axis = 0, .ways = 3}},
              {"bias", {4}, nn::initializer::uniform_fan_in(4)}};
    }
    int shard_index() const { return Index; }
    void bind(const nn::parameter_binding<storage_t<precision>, Space>&) {}
    void reserve(index_t, stream_t) {}
    template <class Executor>
    void forward(const auto&, const auto&, const nn::run_mode&, const Executor&) {}
    template <class Executor>
    void backward(const auto&, const auto&, const auto&, const auto&, const Executor&) {}
  };
};
template <int Index>
using sliced_net = nn::sequential<nn::features<4>, sliced_layer<Index>>;
}  // namespace

FUSOR_TEST_CASE("network: a sharded parameter is initialised as its slice of the full tensor") {
  // The full tensor: parameter 0 of layer 0 drawn as the unsharded [6, 4] matrix.
  nn::parameter_spec full{"weight", {6, 4}, nn::initializer::uniform_fan_in(4)};
  std::vector<float> expected(24);
  nn::initialize_parameter(expected.data(), full, nn::derive_seed(5, 0), 0);
  std::vector<float> got;
  auto append_slice = [&](auto& net) {
    const auto& slot = net.template group<float>().slots()[0];
    for (double v : as_doubles(net.template group<float>().value(slot))) got.push_back(float(v));
  };
  nn::network<sliced_net<0>, fp32, space> s0(1, {.seed = 5});
  nn::network<sliced_net<1>, fp32, space> s1(1, {.seed = 5});
  nn::network<sliced_net<2>, fp32, space> s2(1, {.seed = 5});
  append_slice(s0);
  append_slice(s1);
  append_slice(s2);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == expected[i]);
  // The unsharded bias is the same on every slice.
  CHECK(as_doubles(s0.group<float>().value(s0.group<float>().slots()[1])) ==
        as_doubles(s2.group<float>().value(s2.group<float>().slots()[1])));
}

}  // namespace test_network_stages
