// A sum along an axis of a static [4, 8] tensor into a static destination of
// shape [5]: no axis gives [5] ([8] or [4]), so it must not compile, and the
// message must name both shapes. (With FUSOR_COMPILE_FAIL undefined, the
// destination is [4], the sum along axis 1, and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/kernels/reduce.hpp>

int main() {
  fusor::tensor<float, fusor::extents<int, 4, 8>> x;
#ifdef FUSOR_COMPILE_FAIL
  fusor::tensor<float, fusor::extents<int, 5>> rows;
#else
  fusor::tensor<float, fusor::extents<int, 4>> rows;
#endif
  fusor::sum(rows, x, 1);
}
