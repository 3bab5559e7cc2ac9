#!/usr/bin/env python3
"""Evaluates in PyTorch an MLP that fusor trained: the interoperability check
of fusor's safetensors checkpoints.

    build/examples/fashion_mnist_mlp --checkpoint mlp.safetensors
    python3 examples/fashion_mnist_mlp_pytorch.py mlp.safetensors

fusor names a parameter "<layer index>.<name>" as torch.nn.Sequential does;
fusor's linear<784, 512, nn::relu> is one layer (the ReLU is fused into it),
so the PyTorch model applies the ReLUs between the Linear modules itself.
The test accuracy printed here should equal the one fusor printed for the same
epoch (up to float rounding in a few borderline images).

Needs torch, numpy and safetensors (the scripts install the last two).
"""
import argparse
import gzip
import struct
import sys

import numpy as np
import torch
from safetensors.torch import load_file


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]  # magic: two zero bytes, the type (0x08: unsigned byte), the number of dimensions
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


class FusorMlp(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = parser.parse_args()

    tensors = load_file(args.checkpoint)
    weights = sorted((k for k in tensors if k.endswith(".weight") and k.split(".")[0].isdigit()), key=lambda k: int(k.split(".")[0]))
    sizes = [tensors[weights[0]].shape[1]] + [tensors[k].shape[0] for k in weights]
    model = FusorMlp(sizes)
    state = {}
    for i, key in enumerate(weights):
        layer = key.split(".")[0]
        state[f"layers.{i}.weight"] = tensors[f"{layer}.weight"].float()
        state[f"layers.{i}.bias"] = tensors[f"{layer}.bias"].float()
    model.load_state_dict(state)

    images = read_idx(f"{args.data}/t10k-images-idx3-ubyte.gz").astype(np.float32).reshape(-1, 784)
    labels = read_idx(f"{args.data}/t10k-labels-idx1-ubyte.gz").astype(np.int64)
    x = (torch.from_numpy(images) / 255.0 - 0.2860) / 0.3530
    with torch.no_grad():
        logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels)).item()
    accuracy = (logits.argmax(1).numpy() == labels).mean()
    print(f"PyTorch {torch.__version__}: MLP {'-'.join(map(str, sizes))} from {args.checkpoint}: "
          f"test loss {loss:.4f}, test accuracy {100 * accuracy:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
