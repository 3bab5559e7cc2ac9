// Host tensors assigned on the cuda executor: must not compile (under nvcc),
// and the message must say that the executor cannot reach their memory.
// (With FUSOR_COMPILE_FAIL undefined, the tensors are device_space and it must compile.)
#include <fusor/core/tensor.hpp>
#include <fusor/exec/assign.hpp>
#include <fusor/exec/cuda.hpp>
#include <fusor/expr/operators.hpp>

int main() {
#ifdef FUSOR_COMPILE_FAIL
  using space = fusor::host_space;
#else
  using space = fusor::device_space;
#endif
  fusor::tensor<float, fusor::extents<int, 16>, fusor::row_major, space> x, y;
  fusor::assign(y, fusor::relu(x) + 1.0f, fusor::cuda_executor{});
}
