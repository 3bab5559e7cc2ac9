// Compile-fail program (tests/suites/matmul.cmake): a matmul of static shapes
// c [4, 3] = a [4, 6] times b [5, 3] must not compile, and the message must
// name all three shapes. (With FUSOR_COMPILE_FAIL undefined, b is [6, 3] and
// it must compile.)
#include <fusor/kernels/matmul.hpp>

int main() {
  fusor::tensor<float, fusor::extents<int, 4, 6>> a;
  fusor::tensor<float, fusor::extents<int, 4, 3>> c;
#ifdef FUSOR_COMPILE_FAIL
  fusor::tensor<float, fusor::extents<int, 5, 3>> b;
#else
  fusor::tensor<float, fusor::extents<int, 6, 3>> b;
#endif
  fusor::matmul(c, a, b);
}
