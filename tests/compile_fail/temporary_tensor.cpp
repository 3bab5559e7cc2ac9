// A temporary tensor as an operand (the expression would outlive its memory):
// must not compile, and the message must say so.
// (With FUSOR_COMPILE_FAIL undefined, the tensor is an lvalue and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/expr/operators.hpp>

using vector = fusor::tensor<float, fusor::extents<int, fusor::dynamic>>;

vector make_tensor() { return vector(8); }

int main() {
#ifdef FUSOR_COMPILE_FAIL
  auto e = fusor::exp(make_tensor()) + 1.0f;
#else
  vector t = make_tensor();
  auto e = fusor::exp(t) + 1.0f;
#endif
  (void)e;
}
