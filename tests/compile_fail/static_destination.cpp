// An expression of static shape [3, 4] assigned to a destination of static
// shape [4, 4]: must not compile, and the message must name both shapes.
// (With FUSOR_COMPILE_FAIL undefined, the destination is [3, 4] and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/expr/operators.hpp>

int main() {
  fusor::tensor<float, fusor::extents<int, 3, 4>> x;
#ifdef FUSOR_COMPILE_FAIL
  fusor::tensor<float, fusor::extents<int, 4, 4>> y;
#else
  fusor::tensor<float, fusor::extents<int, 3, 4>> y;
#endif
  fusor::assign(y, fusor::sigmoid(x) * 2.0f);
}
