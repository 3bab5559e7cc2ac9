#!/usr/bin/env python3
"""PyTorch's causal attention on the GPU on the shapes of bench/attention_cuda.cu.

From a bf16 qkv [B, T, 3C] (nanoGPT's c_attn output) to y [B, T, C]:
nanoGPT's split, view and transposes around
torch.nn.functional.scaled_dot_product_attention(is_causal=True), which runs
FlashAttention-2 (or cuDNN's attention) inside on an H100/H200. Forward, and
forward + backward; FLOP/s counted as attention_cuda.cu counts them
(4 B H T^2 D / 2 forward, 3.5 times that forward + backward); median of 20
timed runs between CUDA events after 3 warm-up runs.

Run on the GPU machine: python3 bench/attention_torch_gpu.py
(scripts/gpu_check.sh's bench phase runs it right after bench_attention_cuda.)
"""
import sys

import cuda_event_timing
import torch
import torch.nn.functional as F

SHAPES = [(8, 1024, 12, 64), (4, 2048, 12, 64), (4, 1024, 8, 128)]
WARMUP, TIMED = 3, 20


def median_ms(work):
    return cuda_event_timing.median_ms(work, WARMUP, TIMED)


def attention(qkv, heads):
    b, t, width = qkv.shape
    c = width // 3
    q, k, v = qkv.split(c, dim=2)
    q, k, v = (x.view(b, t, heads, c // heads).transpose(1, 2) for x in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).contiguous().view(b, t, c)


def main():
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    torch.manual_seed(1)
    print(f"PyTorch {torch.__version__} scaled_dot_product_attention, bf16, on {torch.cuda.get_device_name()}\n")
    print("| B x T x heads x head_dim | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |\n|---|---:|---:|---:|---:|")
    for b, t, h, d in SHAPES:
        qkv = (torch.rand(b, t, 3 * h * d, device="cuda") * 3 - 1.5).to(torch.bfloat16).requires_grad_()
        dy = (torch.rand(b, t, h * d, device="cuda") * 3 - 1.5).to(torch.bfloat16)
        with torch.no_grad():
            forward = median_ms(lambda: attention(qkv, h))

        def forward_backward():
            qkv.grad = None
            attention(qkv, h).backward(dy)

        both = median_ms(forward_backward)
        flops = 4 * b * h * t * t * d / 2
        print(f"| {b} x {t} x {h} x {d} | {forward:8.3f} | {flops / forward * 1e-9:6.1f} | {both:8.3f} | "
              f"{3.5 * flops / both * 1e-9:6.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
