// The harness's control: a correct program using what the other programs
// misuse (static and dynamic shapes that broadcast, a substituted symbolic
// expression, a derivative, several outputs in one pass). It must compile, so a
// broken harness (include paths, flags, compiler) cannot pass the
// must-not-compile tests vacuously.
#include <fusor/fusor.hpp>

int main() {
  fusor::tensor<float, fusor::extents<int, 3, 4>> a, out;
  fusor::tensor<float, fusor::extents<int, 1, 4>> row;
  fusor::tensor<float, fusor::extents<int, fusor::dynamic, 4>> b(3);
  const auto f = fusor::arg<0> * fusor::sigmoid(fusor::arg<0>);
  const auto df = fusor::derivative(f, fusor::arg<0>);
  fusor::assign(out, a * row + fusor::substitute(f, b));
  fusor::assign_many(fusor::host_executor{}, fusor::out(out, fusor::substitute(df, a) * b), fusor::out(b, a + row));
  return fusor::evaluate_scalar(fusor::substitute(df, 0.0)) == 0.5 ? 0 : 1;
}
