// nn::causal_attention: every input's gradient against central differences,
// fp64 on the host, through networks of the layer alone and of a GPT block's
// attention (qkv projection, attention, output projection); with grouped-query
// heads, rotary embeddings, and a sequence longer than one kernel block. Its
// shape inference and policies at compile time.
//
// The rotary embedding is LLaMA's (pairs of neighbours), in PyTorch:
//   freqs = 1.0 / (base ** (torch.arange(0, D, 2).float() / D))       # [D/2]
//   angles = torch.outer(torch.arange(T).float(), freqs)              # [T, D/2]
//   xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
//   x_rotated = torch.view_as_real(xc * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
// applied to q [B, T, H, D] and k [B, T, G, D] before
//   y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  (k, v repeated over each group).
#include "nn/nn_test.hpp"

#include <fusor/nn/attention.hpp>
#include <fusor/nn/linear.hpp>

using namespace fusor;

// Shapes and policies, checked by the compiler.
static_assert(std::is_same_v<nn::causal_attention<6, 64>::output<nn::features<256, 3 * 384>>, nn::features<256, 384>>);
static_assert(nn::causal_attention<6, 64>::accepts<nn::features<256, 1152>> &&
              !nn::causal_attention<6, 64>::accepts<nn::features<256, 1151>> &&
              !nn::causal_attention<6, 64>::accepts<nn::features<1152>>);
static_assert(nn::causal_attention<4, 8, nn::kv_heads<2>>::kv_heads == 2 &&
              nn::causal_attention<4, 8, nn::kv_heads<2>>::input_width == (4 + 2 * 2) * 8);
static_assert(nn::causal_attention<4, 8>::kv_heads == 4 && !nn::causal_attention<4, 8>::has_rotary);
static_assert(nn::causal_attention<4, 8, nn::rotary<>, nn::kv_heads<1>>::rotary_base == 10000 &&
              nn::causal_attention<4, 8, nn::rotary<500>>::rotary_base == 500);
static_assert(std::is_same_v<nn::causal_attention<2, 4, nn::precision<fp32>, nn::rotary<>>::policies::precision, fp32>);
using gpt_attention =
    nn::sequential<nn::features<16, 32>, nn::linear<32, 96>, nn::causal_attention<4, 8>, nn::linear<32, 32>>;
static_assert(std::is_same_v<gpt_attention::output_features, nn::features<16, 32>>);

template <std::size_t T, std::size_t Width, class... Layers>
using network_of = nn::sequential<nn::features<T, Width>, Layers...>;

TEST_CASE("causal_attention: input gradients against central differences") {
  nn_test::check_gradients<network_of<5, 3 * 2 * 4, nn::causal_attention<2, 4>>>(2, 101);
  nn_test::check_gradients<network_of<1, 3 * 3 * 4, nn::causal_attention<3, 4>>>(2, 102);  // T = 1
  // Past one block of the host kernel (64 positions): 70 positions, every 21st input checked.
  nn_test::check_gradients<network_of<70, 3 * 1 * 6, nn::causal_attention<1, 6>>>(1, 103);
}

TEST_CASE("causal_attention: grouped-query heads (H = 4 with G = 2 and G = 1)") {
  nn_test::check_gradients<network_of<6, (4 + 2 * 2) * 4, nn::causal_attention<4, 4, nn::kv_heads<2>>>>(2, 111);
  nn_test::check_gradients<network_of<7, (4 + 2 * 1) * 4, nn::causal_attention<4, 4, nn::kv_heads<1>>>>(2, 112);
}

TEST_CASE("causal_attention: rotary embeddings, alone and with grouped-query heads") {
  using grouped_rotary = nn::causal_attention<4, 6, nn::kv_heads<2>, nn::rotary<100>>;
  nn_test::check_gradients<network_of<7, 3 * 2 * 4, nn::causal_attention<2, 4, nn::rotary<>>>>(2, 121);
  nn_test::check_gradients<network_of<9, (4 + 2 * 2) * 6, grouped_rotary>>(2, 122);
}

TEST_CASE("causal_attention: a GPT block's attention, projections and all parameters") {
  using multi_query_rotary = nn::causal_attention<2, 4, nn::kv_heads<1>, nn::rotary<>>;
  nn_test::check_gradients<network_of<6, 8, nn::linear<8, 24>, nn::causal_attention<2, 4>, nn::linear<8, 8>>>(2, 131);
  nn_test::check_gradients<network_of<5, 8, nn::linear<8, 16>, multi_query_rotary, nn::linear<8, 6>>>(2, 132);
}
