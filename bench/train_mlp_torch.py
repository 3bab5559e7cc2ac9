#!/usr/bin/env python3
"""PyTorch on the CPU on the training steps of bench/train_mlp_host.cpp, for comparison.

One step is what a PyTorch training loop does for every batch: zero_grad,
forward, CrossEntropyLoss, backward, torch.optim.AdamW(lr=1e-3,
weight_decay=1e-4).step(), fp32, on nn.Sequential(Linear, ReLU, ..., Linear)
models 784-512-256-10 (batch 128 and 256) and 784-256-10 (batch 128). Inputs
are standard normal, labels uniform over ten classes (fixed seed), eight
batches cycled, as in the fusor benchmark. Timing as bench/rowwise_torch.py:
a warm-up, then REPETITIONS runs of at least --min-seconds each; the mean step
time of each run, and the median and the best (min) of the runs. Prints
samples/s per case.

Threads: torch.set_num_threads(--threads, default 2) sets PyTorch's OpenMP
threads; its matrix products go to the system BLAS (Debian: OpenBLAS, with its
own threads: set OPENBLAS_NUM_THREADS the same for both sides). Run both sides
with the same environment, e.g. OMP_WAIT_POLICY=passive.

Two ways to compare (Debian: apt-get install python3-torch; use /usr/bin/python3
if another python3 comes first on PATH):

  --fusor FILE...   the JSON that bench_train_mlp_host wrote just before
                    (--benchmark_repetitions=5 --benchmark_out=FILE
                    --benchmark_out_format=json; several builds: several
                    files): a Markdown table of both and of the ratio
                    fusor / PyTorch for the median and the best run.
  --run BINARY...   interleaved, for a machine whose load changes from minute
                    to minute: for each of --rounds rounds and each case, runs
                    every BINARY on that case alone (one run of at least
                    --min-seconds), then one PyTorch run of the case. Table:
                    median and best samples/s over the rounds, and the median
                    over rounds of the ratio within each round.
Each FILE or BINARY may be given as LABEL=PATH to name its column.

Ratios are samples/s, so above 1 means fusor faster. With --phases it also
times forward, loss, backward and the optimizer step separately (torch's
lines only), beside fusor_step_phases.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

# (model name as in the fusor benchmark, layer sizes, batches)
CASES = [("784-512-256-10", (784, 512, 256, 10), (128, 256)),
         ("784-256-10", (784, 256, 10), (128,))]
BATCHES_CYCLED = 8
REPETITIONS = 5
UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class torch_case:
    """A model, its AdamW and its batches; step() is one training step."""

    def __init__(self, sizes, batch):
        torch.manual_seed(1)
        self.batch = batch
        self.model = mlp(sizes)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=1e-4)
        self.loss_function = torch.nn.CrossEntropyLoss()
        generator = torch.Generator().manual_seed(2026)
        self.batches = [(torch.randn(batch, sizes[0], generator=generator),
                         torch.randint(0, 10, (batch,), generator=generator)) for _ in range(BATCHES_CYCLED)]
        self.k = 0
        for _ in range(5):
            self.step()  # warm-up: allocator, AdamW state, OpenBLAS threads

    def step(self):
        images, labels = self.batches[self.k]
        self.k = (self.k + 1) % len(self.batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_function(self.model(images), labels)
        loss.backward()
        self.optimizer.step()
        return loss

    def run_ms(self, min_seconds):
        """Mean ms per step of a run of at least min_seconds."""
        calls, start = 0, time.perf_counter()
        while True:
            self.step()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_seconds:
                return elapsed / calls * 1e3

    def check(self):
        loss = float(self.step())
        assert loss == loss and loss < 3.0, f"loss {loss}"

    def phase_times_ms(self, steps=200):
        """Mean ms of forward, loss, backward, optimizer (zero_grad + step) over `steps` steps."""
        totals = [0.0] * 4
        for k in range(steps):
            images, labels = self.batches[k % len(self.batches)]
            t0 = time.perf_counter()
            logits = self.model(images)
            t1 = time.perf_counter()
            loss = self.loss_function(logits, labels)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            t4 = time.perf_counter()
            for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                totals[i] += d
        return [t / steps * 1e3 for t in totals]


def fusor_rates(path):
    """{(model, batch, statistic): samples/s} of fusor_train_step from Google Benchmark's JSON."""
    rates = {}
    with open(path) as f:
        results = json.load(f)
    for b in results["benchmarks"]:
        if b.get("run_type") != "aggregate" or b["aggregate_name"] not in ("median", "min"):
            continue
        name, model, batch = b["run_name"].split("/")[:3]
        if name != "fusor_train_step":
            continue
        model, batch = model.split(":")[1], int(batch.split(":")[1])
        # From the time, not the items_per_second counter: the counter's "min" is the slowest run.
        rates[(model, batch, b["aggregate_name"])] = batch / (b["real_time"] * UNIT_SECONDS[b["time_unit"]])
    return rates


def labelled(argument):
    """(label, path) from LABEL=PATH, or (PATH, PATH)."""
    label, _, path = argument.rpartition("=")
    return (label or path), path


def fusor_run(binary, model, batch, min_seconds):
    """Samples/s of one run of fusor_train_step on one case."""
    output = subprocess.run([binary, f"--benchmark_filter=^fusor_train_step/model:{model}/batch:{batch}/",
                             f"--benchmark_min_time={min_seconds}", "--benchmark_format=json"],
                            check=True, capture_output=True, text=True).stdout
    (b,) = json.loads(output)["benchmarks"]
    if b.get("error_occurred"):
        raise RuntimeError(f"{binary}: {b.get('error_message')}")
    return batch / (b["real_time"] * UNIT_SECONDS[b["time_unit"]])


def compare_saved(arguments, cases):
    torch_rates = {}
    for (model_name, batch), case in cases.items():
        runs = [case.run_ms(arguments.min_seconds) for _ in range(REPETITIONS)]
        case.check()
        for statistic, ms in (("median", statistics.median(runs)), ("min", min(runs))):
            torch_rates[(model_name, batch, statistic)] = batch / ms * 1e3
            print(f"torch_train_step/model:{model_name}/batch:{batch}/threads:{arguments.threads}_{statistic}"
                  f"  {ms:8.3f} ms  items_per_second={batch / ms:7.3f}k/s")
    if not arguments.fusor:
        return
    print("\n| fusor program | model | batch | threads | fusor samples/s median / best "
          "| PyTorch samples/s median / best | fusor / PyTorch median / best |\n|---|---|---:|---:|---|---|---|")
    for argument in arguments.fusor:
        program, path = labelled(argument)
        fusor = fusor_rates(path)
        for model_name, batch in cases:
            if (model_name, batch, "median") not in fusor:
                continue
            f = [fusor[(model_name, batch, s)] for s in ("median", "min")]
            t = [torch_rates[(model_name, batch, s)] for s in ("median", "min")]
            print(f"| {program} | {model_name} | {batch} | {arguments.threads} | {f[0]:.0f} / {f[1]:.0f} "
                  f"| {t[0]:.0f} / {t[1]:.0f} | {f[0] / t[0]:.2f} / {f[1] / t[1]:.2f} |")


def compare_interleaved(arguments, cases):
    programs, binaries = zip(*(labelled(argument) for argument in arguments.run))
    programs = list(programs)
    rates = {key: {p: [] for p in programs + ["torch"]} for key in cases}
    for r in range(arguments.rounds):
        for (model_name, batch), case in cases.items():
            row = rates[(model_name, batch)]
            for binary, program in zip(binaries, programs):
                row[program].append(fusor_run(binary, model_name, batch, arguments.min_seconds))
            row["torch"].append(batch / case.run_ms(arguments.min_seconds) * 1e3)
            print(f"round {r + 1} {model_name} batch {batch}: "
                  + "  ".join(f"{p} {v[-1]:.0f}" for p, v in row.items()), file=sys.stderr)
    for case in cases.values():
        case.check()
    print(f"\n{arguments.rounds} rounds, {arguments.threads} threads; samples/s median / best over the rounds; "
          "ratio: median over the rounds of fusor / PyTorch within the round\n")
    print("| model | batch | PyTorch | " + " | ".join(programs) + " | "
          + " | ".join(f"{p} / PyTorch" for p in programs) + " |")
    print("|---|---:|---|" + "---|" * len(programs) + "---:|" * len(programs))
    for (model_name, batch), row in rates.items():
        cells = [f"{statistics.median(row[p]):.0f} / {max(row[p]):.0f}" for p in ["torch"] + programs]
        ratios = [f"{statistics.median(f / t for f, t in zip(row[p], row['torch'])):.2f}" for p in programs]
        print(f"| {model_name} | {batch} | " + " | ".join(cells + ratios) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fusor", nargs="+", default=[], help="bench_train_mlp_host's JSON output(s)")
    parser.add_argument("--run", nargs="+", default=[], help="bench_train_mlp_host binaries to interleave with")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of --run (default 8)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="length of one timed run (default 1)")
    parser.add_argument("--phases", action="store_true", help="also time forward, loss, backward, optimizer")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.__config__.parallel_info().splitlines()[-1].strip()}", file=sys.stderr)

    cases = {(name, batch): torch_case(sizes, batch) for name, sizes, batches in CASES for batch in batches}
    if arguments.run:
        compare_interleaved(arguments, cases)
    else:
        compare_saved(arguments, cases)
    if arguments.phases:
        names = ("forward_ms", "loss_ms", "backward_ms", "optimizer_ms")
        for (model_name, batch), case in cases.items():
            phases = case.phase_times_ms()
            print(f"torch_step_phases/model:{model_name}/batch:{batch}  "
                  + "  ".join(f"{n}={t:.3f}" for n, t in zip(names, phases)))


if __name__ == "__main__":
    main()
