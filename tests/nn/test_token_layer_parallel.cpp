// Tensor-parallel nn::linear per token: column -> row blocks over
// features<5, 16> (five tokens a sample) against the unsplit network from the
// same seed: output, input gradient and every parameter's gradient (gathered
// from the slices). Over comm::single (one way) in the host suite; over MPI at
// 2 and 4 ranks in the tokens MPI binary (FUSOR_TEST_MPI).
#include "parallel/tensor_parallel_checks.hpp"

#if defined(FUSOR_TEST_MPI)
#include <fusor/comm/mpi.hpp>

#include "comm/mpi_world.hpp"
#else
#include <fusor/comm/single.hpp>
#endif

namespace {
using namespace tensor_parallel_test;

// Every activation path of a split layer: fused gelu and relu on the column
// side, silu after the sum and none on the row side.
template <class Column, class Row>
using token_mlp = nn::sequential<nn::features<5, 16>, nn::linear<16, 32, nn::gelu_tanh, Column>,
                                 nn::linear<32, 16, nn::silu, Row>, nn::linear<16, 32, nn::relu, Column>,
                                 nn::linear<32, 8, nn::identity, Row>>;
static_assert(std::is_same_v<token_mlp<column<2>, row<2>>::output_features, nn::features<5, 8>>);

template <int Ways, class Precision, class Communicator>
void check_token_block(Communicator& c, double tol) {
  using split_t = nn::network<token_mlp<column<Ways>, row<Ways>>, Precision, fusor::host_space>;
  using whole_t = nn::network<token_mlp<unsplit, unsplit>, Precision, fusor::host_space>;
  using x_extents = extents<index_t, dynamic, 5, 16>;
  using y_extents = extents<index_t, dynamic, 5, 8>;
  const fusor::host_executor ex{};
  split_t split(batch, {.seed = 13});
  parallel::tensor_parallel tp(split, c);
  CHECK(tp.split_layers() == 4);
  whole_t whole(batch, {.seed = 13});
  const auto x = random_tensor<Precision, x_extents, fusor::host_space>(x_extents(batch), 61);
  tensor<Precision, x_extents> dx_split{x_extents(batch)}, dx_whole{x_extents(batch)};
  poison(dx_split);
  poison(dx_whole);
  expect_close(host_values(split.forward(x, ex)), host_values(whole.forward(x, ex)), tol, "output", c.rank());

  const auto dy = random_tensor<Precision, y_extents, fusor::host_space>(y_extents(batch), 62);
  copy(split.output_gradient(), dy);
  copy(whole.output_gradient(), dy);
  split.backward(ex, typename split_t::input_view(dx_split.data(), batch));
  whole.backward(ex, typename whole_t::input_view(dx_whole.data(), batch));
  expect_close(host_values(dx_split), host_values(dx_whole), tol, "input gradient", c.rank());
  expect_same_parameters(c, split, whole, tol, true, "after backward");
}

template <int Ways, class Communicator>
void check_token_blocks(Communicator& c) {
  INFO("rank ", c.rank(), " of ", c.size(), ", ", Ways, " ways");
  check_token_block<Ways, fusor::fp32>(c, 2e-5);
  check_token_block<Ways, fusor::bf16>(c, 0.1);
}
}  // namespace

#if defined(FUSOR_TEST_MPI)
TEST_CASE("tensor-parallel linear per token over MPI: equals the unsplit network") {
  auto& c = comm_test::world();
  parallel::dispatch_tensor_parallel<2, 4>(c.size(), {32, 16}, [&]<int Ways>() { check_token_blocks<Ways>(c); });
}
#else
TEST_CASE("tensor-parallel linear per token over comm::single: equals the unsplit network") {
  fusor::comm::single c;
  check_token_blocks<1>(c);
}
#endif
