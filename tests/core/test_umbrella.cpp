// The umbrella header: everything in it compiles together, with g++ and with
// nvcc (two parts of fusor once defined the same detail names), and a program
// written against it alone works, with `using namespace fusor;` in force: no
// fusor name may hide libcu++'s ::cuda (unqualified `cuda::std` below would be
// ambiguous, in this file and in CUB's kernels).
#include <fusor/fusor.hpp>

#include "support/fusor_test.hpp"

using namespace fusor;
static_assert(cuda::std::is_same_v<cuda::std::size_t, std::size_t>,
              "cuda::std must name libcu++ under using namespace fusor");

using namespace fusor_test;

FUSOR_TEST_CASE("fusor.hpp alone is enough for an expression, a reduction and a softmax") {
  host_tensor<float, extents<int, 4, 8>> hx;
  fill_random(hx, 91);
  auto x = to_space(hx);
  space_tensor<float, extents<int, 4, 8>> y;
  executor ex{};
  fusor::softmax(y, x * 2, ex);
  const double total = fusor::sum(y, ex);  // each row sums to 1
  CHECK(total == doctest::Approx(4.0).epsilon(1e-5));
}
