// A column-parallel layer split 3 ways over a width of 128: must not compile,
// and the error must name the width and the degree. (Without
// FUSOR_COMPILE_FAIL the degree is 2, which divides it, and it must compile.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/sequential.hpp>

namespace nn = fusor::nn;

#ifdef FUSOR_COMPILE_FAIL
constexpr int ways = 3;
#else
constexpr int ways = 2;
#endif

using mlp = nn::sequential<nn::features<64>, nn::linear<64, 128, nn::relu, nn::parallel<nn::column_parallel<ways>>>>;
using layers = mlp::instances<fusor::fp32, fusor::host_space>;

int main() { return std::tuple_size_v<layers> == 1 ? 0 : 1; }
