// A view of device memory assigned under the host executor: must not compile,
// and the message must say the executor cannot reach that memory space. (A
// device tensor needs nvcc; a device_space view over a raw pointer does not.)
// (With FUSOR_COMPILE_FAIL undefined, the view is host_space and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/expr/operators.hpp>

int main() {
  float memory[16] = {};
  fusor::tensor<float, fusor::extents<int, 16>> x;
#ifdef FUSOR_COMPILE_FAIL
  using space = fusor::device_space;
#else
  using space = fusor::host_space;
#endif
  fusor::view<float, fusor::extents<int, 16>, fusor::row_major, space> y(memory);
  fusor::assign(y, fusor::relu(x) + 1.0f, fusor::host_executor{});
}
