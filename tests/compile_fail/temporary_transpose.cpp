// transpose (permute, slice) of a temporary tensor: the strided view would
// outlive the memory. Must not compile, naming the mistake. (With
// FUSOR_COMPILE_FAIL undefined, the tensor is a variable: transpose takes the
// tensor itself, without .view(), and it must compile.)
#include <fusor/core/strided_views.hpp>
#include <fusor/core/tensor.hpp>

using matrix = fusor::tensor<float, fusor::extents<int, 3, 4>>;

matrix make_matrix() { return matrix(); }

int main() {
#ifdef FUSOR_COMPILE_FAIL
  auto t = fusor::transpose(make_matrix());
#else
  matrix m = make_matrix();
  auto t = fusor::transpose(m);
  static_assert(decltype(t)::extents_type::static_extent(0) == 4);
#endif
  (void)t;
}
