#!/usr/bin/env python3
"""PyTorch on the GPU on the shapes of bench/rowwise_cuda.cu, for comparison.

Same rows (2^26 elements per array, n = 4096 ... 131072), same kernels, same
byte counts and the same timing (median of 30 runs between CUDA events, after
5 warm-up runs): torch.softmax fp32/bf16, softmax's backward
(torch._softmax_backward_data), F.layer_norm fp32/bf16, layer norm's backward in
bf16 (torch.ops.aten.native_layer_norm_backward: dx, dweight, dbias) and
F.cross_entropy on bf16 logits (forward + backward, PyTorch's two kernels at
least; fusor's is one fused, in-place kernel). Outputs come from PyTorch's caching
allocator, which hands back the same blocks after the first run.

Run on the GPU machine: python3 bench/rowwise_torch_gpu.py
(scripts/gpu_check.sh's bench phase runs it right after bench_rowwise_cuda, so
the two tables come from the same card in the same session.)
"""
import sys

import cuda_event_timing
import torch
import torch.nn.functional as F

ELEMENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 26  # a smaller count for a quick try
WARMUP, TIMED = 5, 30


def median_ms(work):
    return cuda_event_timing.median_ms(work, WARMUP, TIMED)


def row(kernel, precision, rows, n, ms, nbytes, copy_gbps):
    gbps = nbytes / ms * 1e-6
    print(f"| {kernel:<22} | {precision:<4} | {rows:6d} x {n:<6d} | {ms:8.3f} | {gbps:7.0f} | {gbps / copy_gbps:5.2f} |")


def main():
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    torch.manual_seed(0)
    a = torch.empty(ELEMENTS, device="cuda")
    b = torch.empty_like(a)
    a.uniform_()
    copy_gbps = 2 * a.numel() * 4 / median_ms(lambda: b.copy_(a)) * 1e-6
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}; copy bandwidth (256 MiB, read + write) "
          f"{copy_gbps:.0f} GB/s\n")
    print("| kernel | prec | rows x n | ms | GB/s | / copy |\n|---|---|---|---:|---:|---:|")
    names = {torch.float32: "fp32", torch.bfloat16: "bf16"}
    for n in (4096, 8192, 32768, 50257, 50304, 131072):
        rows = ELEMENTS // n
        for dtype in (torch.float32, torch.bfloat16):
            size = torch.tensor([], dtype=dtype).element_size()
            x = (torch.rand(rows, n, device="cuda") * 16 - 8).to(dtype)
            y = torch.softmax(x, -1)
            ms = median_ms(lambda: torch.softmax(x, -1))
            row("softmax", names[dtype], rows, n, ms, 2 * rows * n * size, copy_gbps)
            if dtype == torch.float32:
                dy = torch.rand_like(x) * 2 - 1
                ms = median_ms(lambda: torch._softmax_backward_data(dy, y, -1, dtype))
                row("softmax_backward", names[dtype], rows, n, ms, 3 * rows * n * size, copy_gbps)
            w = torch.rand(n, device="cuda", dtype=dtype)
            bias = torch.rand(n, device="cuda", dtype=dtype)
            ms = median_ms(lambda: F.layer_norm(x, (n,), w, bias))
            row("layernorm", names[dtype], rows, n, ms, 2 * rows * n * size, copy_gbps)
            if dtype == torch.bfloat16:
                _, mean, rstd = torch.ops.aten.native_layer_norm(x, (n,), w, bias, 1e-5)
                dy = (torch.rand(rows, n, device="cuda") * 2 - 1).to(dtype)
                ms = median_ms(lambda: torch.ops.aten.native_layer_norm_backward(
                    dy, x, (n,), mean, rstd, w, bias, (True, True, True)))
                row("layernorm_backward", names[dtype], rows, n, ms, 3 * rows * n * size, copy_gbps)
        logits = (torch.rand(rows, n, device="cuda") * 12 - 6).to(torch.bfloat16).requires_grad_()
        targets = (torch.arange(rows, device="cuda") * 7919) % n

        def cross_entropy():
            logits.grad = None
            F.cross_entropy(logits, targets).backward()

        ms = median_ms(cross_entropy)
        row("cross_entropy (fwd+bwd)", "bf16", rows, n, ms, 2 * rows * n * 2, copy_gbps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
