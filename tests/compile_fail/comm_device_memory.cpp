// A view of device memory given to the single communicator, which copies host
// memory: must not compile, and the message must point to the nccl policy.
// (With FUSOR_COMPILE_FAIL undefined, the views are host_space and it must compile.)
#include <fusor/comm/single.hpp>

int main() {
  float memory[8] = {}, out[8] = {};
#ifdef FUSOR_COMPILE_FAIL
  using space = fusor::device_space;
#else
  using space = fusor::host_space;
#endif
  using flat = fusor::view<float, fusor::dextents<fusor::index_t, 1>, fusor::row_major, space>;
  fusor::comm::single c;
  c.all_reduce(flat(memory, 8), flat(out, 8), fusor::comm::reduction_op::sum).wait();
}
