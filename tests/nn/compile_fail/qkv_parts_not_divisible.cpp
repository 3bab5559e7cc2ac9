// A GPT's qkv projection (C = 32, output 3C = 96) split in three interleaved
// parts over 3 ranks: 3 divides 96 but not each part of 32, so it must not
// compile, and the error must name the width, the parts and the ways.
// (Without FUSOR_COMPILE_FAIL it is split 2 ways, which divides each part, and
// it must compile.)
#include <fusor/nn/linear.hpp>
#include <fusor/nn/sequential.hpp>

namespace nn = fusor::nn;

#ifdef FUSOR_COMPILE_FAIL
constexpr int ways = 3;
#else
constexpr int ways = 2;
#endif

using qkv = nn::sequential<nn::features<8, 32>, nn::linear<32, 96, nn::identity, nn::parallel<nn::column_parallel<ways, 3>>>>;
using layers = qkv::instances<fusor::fp32, fusor::host_space>;

int main() { return std::tuple_size_v<layers> == 1 ? 0 : 1; }
