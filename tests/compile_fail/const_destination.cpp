// A const tensor as the destination of an assignment: a tensor owns its
// elements, so a const one must keep them. Must not compile, naming the mistake.
// (With FUSOR_COMPILE_FAIL undefined, the tensor is not const and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/expr/operators.hpp>

using vector = fusor::tensor<float, fusor::extents<int, 8>>;

int main() {
  vector x;
#ifdef FUSOR_COMPILE_FAIL
  const vector y;
#else
  vector y;
#endif
  fusor::assign(y, fusor::exp(x) + 1.0f);
}
