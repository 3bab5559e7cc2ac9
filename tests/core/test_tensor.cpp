// Tensors, views, layouts and copies: construction, indexing, strided views and
// round trips between spaces.
#include "support/fusor_test.hpp"

using namespace fusor_test;

FUSOR_TEST_CASE("a tensor round-trips through the tested space") {
  host_tensor<float, extents<int, dynamic, 7>> h(5);
  fill_random(h, 1);
  auto t = to_space(h);
  auto back = to_host(t);
  for (index_t i = 0; i < h.size(); ++i) CHECK(back.data()[i] == h.data()[i]);
}
