// A symbolic expression (with arg<N>) assigned without substitute(): must not
// compile, and the message must say that placeholders remain.
// (With FUSOR_COMPILE_FAIL undefined, the operand is substituted and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/expr/operators.hpp>
#include <fusor/expr/substitute.hpp>

int main() {
  fusor::tensor<float, fusor::extents<int, fusor::dynamic>> x(8), y(8);
  auto f = fusor::arg<0> * fusor::sigmoid(fusor::arg<0>);
#ifdef FUSOR_COMPILE_FAIL
  fusor::assign(y, f);
#else
  fusor::assign(y, fusor::substitute(f, x));
#endif
}
