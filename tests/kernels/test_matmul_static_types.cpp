// Compile-fail program (tests/suites/matmul.cmake): a bf16 a times a float b
// is no combination BLAS or cuBLASLt multiplies, and must not compile. (With
// FUSOR_COMPILE_FAIL undefined, both are bf16 and it must compile.)
#include <fusor/kernels/matmul.hpp>

int main() {
  using matrix = fusor::dextents<fusor::index_t, 2>;
  fusor::tensor<fusor::bf16, matrix> a(4, 6);
  fusor::tensor<float, matrix> c(4, 3);
#ifdef FUSOR_COMPILE_FAIL
  fusor::tensor<float, matrix> b(6, 3);
#else
  fusor::tensor<fusor::bf16, matrix> b(6, 3);
#endif
  fusor::matmul(c, a, b);
}
