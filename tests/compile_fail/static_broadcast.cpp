// Two operands whose static shapes, [3, 4] and [5, 4], do not broadcast: the
// expression must not compile, and the message must name both shapes.
// (With FUSOR_COMPILE_FAIL undefined, the twin below uses [1, 4] and must compile.)
#include <fusor/core/view.hpp>
#include <fusor/expr/operators.hpp>

int main() {
  float a_data[3 * 4] = {};
#ifdef FUSOR_COMPILE_FAIL
  float b_data[5 * 4] = {};
  fusor::view<float, fusor::extents<int, 5, 4>> b(b_data);
#else
  float b_data[1 * 4] = {};
  fusor::view<float, fusor::extents<int, 1, 4>> b(b_data);
#endif
  fusor::view<float, fusor::extents<int, 3, 4>> a(a_data);
  auto e = a * 2.0f + fusor::exp(b);
  (void)e;
}
