#!/usr/bin/env python3
"""tests/train/gpt_pytorch_reference.py — the PyTorch side of the GPT agreement
test (tests/train/test_gpt_pytorch.cpp).

Builds examples/gpt_model.hpp's GPT with PyTorch modules in the same order (so
its state_dict names are fusor's parameter names), draws one initialisation and
random token batches, trains with torch.optim.AdamW in fp32 on the CPU, and
writes into OUT_DIR:
  init.safetensors      the initial parameters (fusor loads them)
  batches.safetensors   inputs and targets [steps, batch, context] int32
  expected.safetensors  losses [steps] and "gradient.<name>" of every parameter
                        after step 1's backward
The C++ test trains the same model on the same batches and compares.

  /usr/bin/python3 tests/train/gpt_pytorch_reference.py OUT_DIR
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

# Must equal tests/train/test_gpt_pytorch.cpp's reference_config.
VOCABULARY, CONTEXT, CHANNELS, HEADS, BLOCKS = 96, 16, 32, 4, 2
BATCH, STEPS = 4, 10
LEARNING_RATE, WEIGHT_DECAY = 5e-3, 0.01


class Residual(torch.nn.Sequential):
    """y = x + f(x): fusor's nn::residual (children named 0, 1, ...)."""

    def forward(self, x):
        return x + super().forward(x)


class PositionEmbedding(torch.nn.Module):
    """fusor's nn::position_embedding: a learned [context, channels] table added."""

    def __init__(self, context, channels):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(context, channels))

    def forward(self, x):
        return x + self.weight


class LinearGelu(torch.nn.Linear):
    """fusor's nn::linear<In, Out, nn::gelu_tanh>: GELU (tanh form) fused after."""

    def forward(self, x):
        return F.gelu(super().forward(x), approximate="tanh")


class CausalAttention(torch.nn.Module):
    """fusor's nn::causal_attention<H, D>: qkv [B, T, 3C] in, [B, T, C] out."""

    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, qkv):
        b, t, c3 = qkv.shape
        c = c3 // 3
        q, k, v = qkv.split(c, dim=2)
        d = c // self.heads
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return y.transpose(1, 2).contiguous().view(b, t, c)


def gpt(vocabulary=VOCABULARY, context=CONTEXT, channels=CHANNELS, heads=HEADS, blocks=BLOCKS):
    """examples/gpt_model.hpp's gpt::model<gpt::config<vocabulary, context, channels, heads, blocks>>."""
    c = channels
    layers = [torch.nn.Embedding(vocabulary, c), PositionEmbedding(context, c)]
    for _ in range(blocks):
        layers.append(Residual(torch.nn.LayerNorm(c), torch.nn.Linear(c, 3 * c), CausalAttention(heads),
                               torch.nn.Linear(c, c)))
        layers.append(Residual(torch.nn.LayerNorm(c), LinearGelu(c, 4 * c), torch.nn.Linear(4 * c, c)))
    # The head is tied to the token embedding (GPT-2's weight tying): its weight
    # is layer 0's, so named_parameters() and the optimizer see it once, as 0.weight.
    head = torch.nn.Linear(c, vocabulary, bias=False)
    head.weight = layers[0].weight
    layers += [torch.nn.LayerNorm(c), head]
    return torch.nn.Sequential(*layers)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    model = gpt()
    # LayerNorm starts at weight 1, bias 0; draw them too, so a swapped weight
    # and bias, or a missed parameter, shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5) if name.endswith("weight") else 0.1 * torch.randn_like(p))
    save_file({n: p.detach().clone().contiguous() for n, p in model.named_parameters()},
              os.path.join(out, "init.safetensors"))

    inputs = torch.randint(0, VOCABULARY, (STEPS, BATCH, CONTEXT), dtype=torch.int32)
    # A rule the model can learn within the ten steps, so the losses fall.
    targets = (inputs * 7 + 3) % VOCABULARY
    save_file({"inputs": inputs, "targets": targets}, os.path.join(out, "batches.safetensors"))

    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=WEIGHT_DECAY)
    losses, expected = [], {}
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        logits = model(inputs[step].long())
        loss = F.cross_entropy(logits.view(-1, VOCABULARY), targets[step].long().view(-1))
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            for name, p in model.named_parameters():
                expected["gradient." + name] = p.grad.detach().clone().contiguous()
        optimizer.step()
    expected["losses"] = torch.tensor(losses, dtype=torch.float64)
    save_file(expected, os.path.join(out, "expected.safetensors"))
    print("losses:", " ".join(f"{x:.6f}" for x in losses))


if __name__ == "__main__":
    main()
