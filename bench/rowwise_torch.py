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
backward 12), for the median and the best (min) of the repetitions.

Run: python3 bench/rowwise_torch.py   (Debian: apt-get install python3-torch;
use /usr/bin/python3 if another python3 comes first on PATH). Given
`--fusor FILE`, the JSON that bench_rowwise_host wrote in the same session
(--benchmark_out=FILE --benchmark_out_format=json, with repetitions), it also
prints a Markdown table of both and of the ratio fusor / PyTorch (elements per
second, so above 1 means fusor faster) for the median and the best run.
"""
import argparse
import json
import statistics
import sys
import time

import torch

SHAPES = [(4096, 1024), (1024, 4096), (128, 32768)]
REPETITIONS = 5


def timings_ms(work, min_seconds=0.5):
    """(median, min) over REPETITIONS of the mean time of a run of at least min_seconds."""
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
    return statistics.median(means), min(means)


torch_rates = {}


def report(name, rows, n, threads, timings, bytes_per_element):
    elements = rows * n
    for statistic, ms in zip(("median", "min"), timings):
        torch_rates[(name, rows, n, threads, statistic)] = elements / ms * 1e3
        print(f"torch_{name}/rows:{rows}/n:{n}/threads:{threads}_{statistic}  {ms:8.3f} ms  "
              f"items_per_second={elements / ms * 1e-3:9.3f}M/s  "
              f"bytes_per_second={elements * bytes_per_element / ms * 1e-6:7.3f}GB/s")


def fusor_rates(path):
    """{(kernel, rows, n, threads, statistic): elements per second} from Google Benchmark's JSON."""
    rates = {}
    with open(path) as f:
        for b in json.load(f)["benchmarks"]:
            if b.get("run_type") != "aggregate" or b["aggregate_name"] not in ("median", "min"):
                continue
            kernel, rows, n, threads = b["run_name"].split("/")[:4]
            rows, n, threads = (int(field.split(":")[1]) for field in (rows, n, threads))
            # From the time, not the items_per_second counter: the counter's "min" is the slowest run.
            seconds = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
            rates[(kernel, rows, n, threads, b["aggregate_name"])] = rows * n / seconds
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusor", help="bench_rowwise_host's JSON output, for the comparison table")
    arguments = parser.parse_args()
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
            report("softmax_forward", rows, n, threads, timings_ms(softmax_forward), 8)
            assert abs(float(y[0].sum()) - 1) < 1e-4

            probabilities = torch.softmax(x, -1)
            def softmax_backward():
                torch._softmax_backward_data(dy, probabilities, -1, torch.float32)
            report("softmax_backward", rows, n, threads, timings_ms(softmax_backward), 12)

            def layernorm_forward():
                torch.nn.functional.layer_norm(x, (n,), weight, bias)
            report("layernorm_forward", rows, n, threads, timings_ms(layernorm_forward), 8)

            _, mean, rstd = torch.ops.aten.native_layer_norm(x, (n,), weight, bias, 1e-5)
            def layernorm_backward():
                torch.ops.aten.native_layer_norm_backward(dy, x, (n,), mean, rstd, weight, bias,
                                                          [True, True, True])
            report("layernorm_backward", rows, n, threads, timings_ms(layernorm_backward), 12)

    if arguments.fusor:
        fusor = fusor_rates(arguments.fusor)
        print("\n| kernel | rows x n | threads | fusor G/s median / best | PyTorch G/s median / best "
              "| fusor / PyTorch median / best |\n|---|---|---:|---|---|---|")
        for (name, rows, n, threads, statistic), rate in torch_rates.items():
            if statistic != "median" or (name, rows, n, threads, "median") not in fusor:
                continue
            f = [fusor[(name, rows, n, threads, s)] for s in ("median", "min")]
            t = [torch_rates[(name, rows, n, threads, s)] for s in ("median", "min")]
            print(f"| {name} | {rows} x {n} | {threads} | {f[0] * 1e-9:.2f} / {f[1] * 1e-9:.2f} "
                  f"| {t[0] * 1e-9:.2f} / {t[1] * 1e-9:.2f} | {f[0] / t[0]:.2f} / {f[1] / t[1]:.2f} |")


if __name__ == "__main__":
    main()
