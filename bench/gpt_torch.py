#!/usr/bin/env python3
"""PyTorch eager on the CPU on bench/gpt_host.cpp's GPT training step, side by side.

The model is examples/gpt_model.hpp's small GPT (vocabulary 96, context 128,
128 channels, 4 heads, 4 blocks), built by tests/train/gpt_pytorch_reference.py
(the modules the agreement test checks fusor against). One step: zero_grad,
forward, cross-entropy over every token, backward, clip_grad_norm_(1.0),
torch.optim.AdamW(lr=1e-3, weight_decay=0.1).step(), fp32; random token
windows (fixed seed), eight batches cycled — as the fusor benchmark.

  /usr/bin/python3 bench/gpt_torch.py                          PyTorch alone
  /usr/bin/python3 bench/gpt_torch.py --run build/bench/bench_gpt_host
      interleaved rounds: the fusor binary on one batch size (Google Benchmark,
      one run of at least --min-seconds), then PyTorch on it; a Markdown table
      of tokens/s (median over rounds) and the median of the per-round ratios
      fusor / PyTorch (above 1: fusor faster).

Threads: --threads (default 2) for PyTorch; run both under the same
environment (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY=passive).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "train"))
from gpt_pytorch_reference import gpt  # noqa: E402

VOCABULARY, CONTEXT, CHANNELS, HEADS, BLOCKS = 96, 128, 128, 4, 4


class torch_case:
    def __init__(self, batch):
        torch.manual_seed(1)
        self.model = gpt(VOCABULARY, CONTEXT, CHANNELS, HEADS, BLOCKS)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.1)
        g = torch.Generator().manual_seed(2026)
        self.batches = [(torch.randint(0, VOCABULARY, (batch, CONTEXT), generator=g),
                         torch.randint(0, VOCABULARY, (batch, CONTEXT), generator=g)) for _ in range(8)]
        self.k = 0
        self.batch = batch
        for _ in range(3):
            self.step()

    def step(self):
        inputs, targets = self.batches[self.k]
        self.k = (self.k + 1) % len(self.batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(inputs).view(-1, VOCABULARY), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()

    def tokens_per_second(self, min_seconds):
        steps, start = 0, time.perf_counter()
        while True:
            self.step()
            steps += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return steps * self.batch * CONTEXT / elapsed


def fusor_tokens_per_second(binary, batch, min_seconds):
    out = subprocess.run([binary, f"--benchmark_filter=fusor_gpt_step/{batch}/", f"--benchmark_min_time={min_seconds}",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["benchmarks"][0]["items_per_second"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", help="bench_gpt_host binary to interleave with")
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| batch | fusor tokens/s | PyTorch tokens/s | fusor / PyTorch |")
    print("|---|---|---|---|")
    for batch in args.batches:
        case = torch_case(batch)
        ours, theirs, ratios = [], [], []
        for _ in range(args.rounds):
            if args.run:
                ours.append(fusor_tokens_per_second(args.run, batch, args.min_seconds))
            theirs.append(case.tokens_per_second(args.min_seconds))
            if args.run:
                ratios.append(ours[-1] / theirs[-1])
        if args.run:
            print(f"| {batch} | {statistics.median(ours):,.0f} | {statistics.median(theirs):,.0f} | "
                  f"{statistics.median(ratios):.2f} |")
        else:
            print(f"| {batch} | | {statistics.median(theirs):,.0f} | |")


if __name__ == "__main__":
    main()
