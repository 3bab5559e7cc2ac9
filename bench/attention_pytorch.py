#!/usr/bin/env python3
"""PyTorch's CPU causal attention on the shapes of bench/bench_attention_host.cpp.

Times, from a qkv tensor [B, T, 3C] (nanoGPT's c_attn output) to y [B, T, C],
the forward and the forward + backward of causal self-attention: batch 4,
6 heads of 64, T = 256, fp32, on 1 and 2 threads. PyTorch 2's
torch.nn.functional.scaled_dot_product_attention(is_causal=True) where it
exists; Debian's PyTorch 1.13 has none, so there it is nanoGPT's own
fallback, the explicit masked softmax:
    att = (q @ k.transpose(-2, -1)) / sqrt(D); att.masked_fill_(future, -inf)
    y = softmax(att, -1) @ v
Both include nanoGPT's split, view and transposes, as fusor's kernel reads
qkv and writes y in those layouts. Prints milliseconds per call (median and
best of the repetitions) and FLOP/s counted as the benchmark counts them
(4 B H T^2 D / 2 forward, 3.5 times that forward + backward).

Run: /usr/bin/python3 bench/attention_pytorch.py   (Debian: python3-torch).
Given `--fusor FILE`, the JSON that bench_attention_host wrote in the same
session (--benchmark_repetitions=5 --benchmark_out=FILE
--benchmark_out_format=json), it also prints a Markdown table of both and of
the ratio PyTorch time / fusor time (above 1: fusor faster). Run the two
back to back on an otherwise idle machine: the ratio is only as good as that.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

BATCH, HEADS, HEAD_DIM, TIMES = 4, 6, 64, (256,)
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


def attention(qkv, mask):
    """nanoGPT's CausalSelfAttention between c_attn and c_proj."""
    batch, steps, width = qkv.shape
    channels = width // 3
    q, k, v = qkv.split(channels, dim=2)
    q = q.view(batch, steps, HEADS, HEAD_DIM).transpose(1, 2)
    k = k.view(batch, steps, HEADS, HEAD_DIM).transpose(1, 2)
    v = v.view(batch, steps, HEADS, HEAD_DIM).transpose(1, 2)
    if hasattr(F, "scaled_dot_product_attention"):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HEAD_DIM))
        att = att.masked_fill(mask, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
    return y.transpose(1, 2).contiguous().view(batch, steps, channels)


def forward_flops(steps):
    return 4.0 * BATCH * HEADS * steps * steps * HEAD_DIM / 2


def fusor_times(path):
    """{(name, T, threads, statistic): milliseconds} from Google Benchmark's JSON."""
    times = {}
    with open(path) as f:
        for b in json.load(f)["benchmarks"]:
            if b.get("run_type") != "aggregate" or b["aggregate_name"] not in ("median", "min"):
                continue
            name, steps, threads = b["run_name"].split("/")[:3]
            steps, threads = (int(field.split(":")[1]) for field in (steps, threads))
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            times[(name, steps, threads, b["aggregate_name"])] = b["real_time"] * scale
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusor", help="bench_attention_host's JSON output, for the comparison table")
    arguments = parser.parse_args()
    formulation = "scaled_dot_product_attention" if hasattr(F, "scaled_dot_product_attention") else "masked softmax"
    print(f"torch {torch.__version__} ({formulation}), {torch.__config__.parallel_info().splitlines()[0]}",
          file=sys.stderr)
    generator = torch.Generator().manual_seed(1)
    torch_times = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for steps in TIMES:
            width = 3 * HEADS * HEAD_DIM
            qkv = torch.rand(BATCH, steps, width, generator=generator) * 3 - 1.5
            dy = torch.rand(BATCH, steps, HEADS * HEAD_DIM, generator=generator) * 2 - 1
            mask = torch.ones(steps, steps, dtype=torch.bool).triu(1)
            with torch.no_grad():
                y = attention(qkv, mask)
                heads_of_v = qkv[0, 0, 2 * HEADS * HEAD_DIM:]
                assert torch.allclose(y[0, 0], heads_of_v, atol=1e-5), "y at the first position is v"
            qkv_grad = qkv.clone().requires_grad_(True)

            def forward():
                with torch.no_grad():
                    attention(qkv, mask)

            def forward_backward():
                qkv_grad.grad = None
                attention(qkv_grad, mask).backward(dy)

            for name, work, flops in (("attention_forward", forward, forward_flops(steps)),
                                      ("attention_forward_backward", forward_backward, 3.5 * forward_flops(steps))):
                median, best = timings_ms(work)
                torch_times[(name, steps, threads, "median")] = median
                torch_times[(name, steps, threads, "min")] = best
                print(f"torch_{name}/T:{steps}/threads:{threads}  median {median:8.3f} ms  min {best:8.3f} ms  "
                      f"FLOP/s={flops / median * 1e-6:7.2f}G/s")

    if arguments.fusor:
        fusor = fusor_times(arguments.fusor)
        print("\n| case | T | threads | fusor ms median / best | PyTorch ms median / best "
              "| PyTorch / fusor median / best |\n|---|---:|---:|---|---|---|")
        for (name, steps, threads, statistic), t_median in torch_times.items():
            if statistic != "median" or (name, steps, threads, "median") not in fusor:
                continue
            f = [fusor[(name, steps, threads, s)] for s in ("median", "min")]
            t = [torch_times[(name, steps, threads, s)] for s in ("median", "min")]
            print(f"| {name} | {steps} | {threads} | {f[0]:.2f} / {f[1]:.2f} | {t[0]:.2f} / {t[1]:.2f} "
                  f"| {t[0] / f[0]:.2f} / {t[1] / f[1]:.2f} |")


if __name__ == "__main__":
    main()
