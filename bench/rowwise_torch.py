#!/usr/bin/env python3
"""PyTorch on the CPU on the shapes of bench/rowwise_host.cpp, for comparison.

Times torch.softmax, softmax's backward (torch._softmax_backward_data),
torch.nn.functional.layer_norm and layer norm's backward (torch.ops.aten.
native_layer_norm_backward: dx, dweight and dbias) on fp32 [rows, n] inputs
with 2^22 elements, on 1 and 2 threads, with outputs preallocated where
PyTorch allows (out=) so allocation is not timed. Prints one line per case in
the units Google Benchmark uses for bench_rowwise_host: milliseconds per call
(median of repetitions), items (elements) per second and bytes per second
counted the same way (softmax and layernorm forward 8 bytes per element,
backward 12).

Run: python3 bench/rowwise_torch.py   (Debian: apt-get install python3-torch;
use /usr/bin/python3 if another python3 comes first on PATH).
"""
import statistics
import sys
import time

import torch

SHAPES = [(4096, 1024), (1024, 4096), (128, 32768)]
REPETITIONS = 5


def median_ms(work, min_seconds=0.5):
    """Median over REPETITIONS of the mean time of a run of at least min_seconds."""
    work()  # warm-up
    means = []
    for _ in range(REPETITIONS):
        calls, start = 0, time.perf_counter()
        while True:
            work()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                break
        means.append(elapsed / calls * 1e3)
    return statistics.median(means)


def report(name, rows, n, threads, ms, bytes_per_element):
    elements = rows * n
    print(f"torch_{name}/rows:{rows}/n:{n}/threads:{threads}  {ms:8.3f} ms  "
          f"items_per_second={elements / ms * 1e-3:9.3f}M/s  "
          f"bytes_per_second={elements * bytes_per_element / ms * 1e-6:7.3f}GB/s")


def main():
    print(f"torch {torch.__version__}, {torch.__config__.parallel_info().splitlines()[0]}", file=sys.stderr)
    generator = torch.Generator().manual_seed(1)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for rows, n in SHAPES:
            x = torch.rand(rows, n, generator=generator) * 8 - 4
            dy = torch.rand(rows, n, generator=generator) * 2 - 1
            weight = torch.rand(n, generator=generator) + 0.5
            bias = torch.rand(n, generator=generator) * 2 - 1
            y = torch.empty_like(x)

            def softmax_forward():
                torch.softmax(x, -1, out=y)
            report("softmax_forward", rows, n, threads, median_ms(softmax_forward), 8)
            assert abs(float(y[0].sum()) - 1) < 1e-4

            probabilities = torch.softmax(x, -1)
            def softmax_backward():
                torch._softmax_backward_data(dy, probabilities, -1, torch.float32)
            report("softmax_backward", rows, n, threads, median_ms(softmax_backward), 12)

            def layernorm_forward():
                torch.nn.functional.layer_norm(x, (n,), weight, bias)
            report("layernorm_forward", rows, n, threads, median_ms(layernorm_forward), 8)

            _, mean, rstd = torch.ops.aten.native_layer_norm(x, (n,), weight, bias, 1e-5)
            def layernorm_backward():
                torch.ops.aten.native_layer_norm_backward(dy, x, (n,), mean, rstd, weight, bias,
                                                          [True, True, True])
            report("layernorm_backward", rows, n, threads, median_ms(layernorm_backward), 12)


if __name__ == "__main__":
    main()
