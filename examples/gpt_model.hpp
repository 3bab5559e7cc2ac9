// examples/gpt_model.hpp — a GPT (GPT-2's architecture: pre-norm residual
// blocks, causal multi-head attention, a GELU MLP of 4x width, learned
// positions, the output head tied to the token embedding) as one fusor type, shared by examples/gpt_char and the test
// that trains it beside PyTorch (tests/train/gpt_pytorch_reference.py builds
// the same modules in the same order, so parameters have the same names).
//
//   using model = gpt::model<gpt::config<96, 128, 128, 4, 4>>;   // vocabulary, context, channels, heads, blocks
//   nn::network<model, fs::fp32, fs::host_space> net(batch, {.seed = 1});
//
// Layers (PyTorch names of their parameters in brackets):
//   0  token embedding            [0.weight: vocabulary x channels]
//   1  position embedding         [1.weight: context x channels]
//   2  residual: layernorm, qkv linear, causal attention, output linear   [2.0.*, 2.1.*, 2.3.*]
//   3  residual: layernorm, linear + GELU (tanh), linear                  [3.0.*, 3.1.*, 3.2.*]
//   ... blocks x (attention, MLP) ...
//   2 + 2 blocks      final layernorm
//   3 + 2 blocks      output head: logits = x wte^T per position, no bias, its weight the
//                     token embedding's table (weight tying, as GPT-2: stored once, as 0.weight)
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include <fusor/nn/attention.hpp>
#include <fusor/nn/embedding.hpp>
#include <fusor/nn/layernorm.hpp>
#include <fusor/nn/linear.hpp>
#include <fusor/nn/position_embedding.hpp>
#include <fusor/nn/residual.hpp>
#include <fusor/nn/sequential.hpp>
#include <fusor/nn/tied_linear.hpp>

namespace gpt {

namespace nn = fusor::nn;

template <std::size_t Vocabulary, std::size_t Context, std::size_t Channels, std::size_t Heads, std::size_t Blocks>
struct config {
  static_assert(Channels % Heads == 0, "gpt::config: the channels must split evenly into the heads");
  static constexpr std::size_t vocabulary = Vocabulary, context = Context, channels = Channels, heads = Heads,
                               blocks = Blocks, head_dim = Channels / Heads;
};

template <std::size_t C, std::size_t H>
using attention_block =
    nn::residual<nn::layernorm<C>, nn::linear<C, 3 * C>, nn::causal_attention<H, C / H>, nn::linear<C, C>>;
template <std::size_t C>
using mlp_block = nn::residual<nn::layernorm<C>, nn::linear<C, 4 * C, nn::gelu_tanh>, nn::linear<4 * C, C>>;

// GPT-2's tables start with deviation 0.02 (the head reads the token table).
using table_init = nn::init_std<2, 100>;

namespace detail {
// Layer 2 + i of the blocks: attention for even i, MLP for odd.
template <class Config, std::size_t I>
using block_layer = std::conditional_t<I % 2 == 0, attention_block<Config::channels, Config::heads>,
                                       mlp_block<Config::channels>>;
template <class Config, class Indices>
struct model_of;
template <class Config, std::size_t... I>
struct model_of<Config, std::index_sequence<I...>> {
  using type = nn::sequential<nn::features<Config::context>,                               //
                              nn::embedding<Config::vocabulary, Config::channels, table_init>,         //
                              nn::position_embedding<Config::context, Config::channels, table_init>,  //
                              block_layer<Config, I>...,                                   //
                              nn::layernorm<Config::channels>,                             //
                              nn::tied_linear<Config::channels, Config::vocabulary, 0>>;
};
}  // namespace detail

template <class Config>
using model = typename detail::model_of<Config, std::make_index_sequence<2 * Config::blocks>>::type;

}  // namespace gpt
