#!/usr/bin/env python3
"""PyTorch on a CUDA GPU on the training step of fashion_mnist_mlp, for comparison (issue 4).

Issue 4's target: fusor's MLP 784-512-256-10 (ReLU) at batch 256 trains at
least 2x as many samples/s as PyTorch eager with AMP on the same GPU; also
compared with torch.compile, and fusor with and without its CUDA graph.

PyTorch variants, each a full step (zero_grad, forward, CrossEntropyLoss,
backward, AdamW(lr=1e-3, weight_decay=1e-4).step()) on device-resident
random batches (standard normal images, uniform labels, eight batches
cycled, fixed seed):
  eager fp32                     no autocast, AdamW's default (foreach) kernels
  eager AMP bf16                 torch.autocast("cuda", torch.bfloat16): the peer
                                 of the target (fusor trains bf16 with fp32 master
                                 weights; autocast keeps fp32 parameters)
  eager AMP bf16, fused AdamW    AdamW(fused=True) where this torch has it
  compile AMP bf16               torch.compile(model) (default mode), fused AdamW
  compile AMP bf16, CUDA graphs  torch.compile(model, mode="reduce-overhead")
Timing: warm-up steps (compilation happens there), then REPETITIONS runs of
--steps steps between torch.cuda.synchronize() calls; samples/s of the median
and of the best run.

fusor's side: examples/fashion_mnist_mlp_cuda (built by nvcc) trains the same
network in bf16 on Fashion-MNIST and prints "... N samples/s (T s)" per epoch,
measured over the training loop only (its loader prefetches on a worker
thread and copies on a separate stream; evaluation is outside the timed part).
The first epoch includes the CUDA graph's capture; take the later epochs.
Given --fusor-binary, this script runs it itself, with the CUDA graph and with
--no-graph, and prints a Markdown table with the ratios.

How to run it in a GPU session (from the repository root; torch >= 2.0 with
CUDA for torch.compile; Fashion-MNIST from Debian's dataset-fashion-mnist or
--data DIR):

  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
  cmake --build build --target fashion_mnist_mlp_cuda -j
  python3 bench/train_mlp_gpu.py --fusor-binary build/examples/fashion_mnist_mlp_cuda
  # or by hand: the two fusor figures, then PyTorch's
  build/examples/fashion_mnist_mlp_cuda --batch 256 --epochs 3 --quiet
  build/examples/fashion_mnist_mlp_cuda --batch 256 --epochs 3 --quiet --no-graph
  python3 bench/train_mlp_gpu.py

Without a CUDA GPU (or without CUDA in torch) it says so and exits with 77.
"""
import argparse
import re
import statistics
import subprocess
import sys
import time

import torch

SIZES = (784, 512, 256, 10)
BATCHES_CYCLED = 8
REPETITIONS = 5


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def adamw(parameters, fused):
    if fused:
        try:
            return torch.optim.AdamW(parameters, lr=1e-3, weight_decay=1e-4, fused=True)
        except (TypeError, RuntimeError):
            return None  # this torch has no fused AdamW
    return torch.optim.AdamW(parameters, lr=1e-3, weight_decay=1e-4)


def make_step(model, optimizer, batches, amp):
    loss_function = torch.nn.CrossEntropyLoss()
    state = {"k": 0}

    def step():
        images, labels = batches[state["k"]]
        state["k"] = (state["k"] + 1) % len(batches)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = loss_function(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss
    return step


def samples_per_second(step, batch, steps, warmup):
    """(median, best) samples/s over REPETITIONS runs of `steps` steps."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        for _ in range(steps):
            loss = step()
        torch.cuda.synchronize()
        rates.append(batch * steps / (time.perf_counter() - start))
    final = float(loss)
    if not final == final:
        raise RuntimeError("the loss is NaN")
    return statistics.median(rates), max(rates)


VARIANTS = [  # (name, amp, fused AdamW, compile mode or None)
    ("eager fp32", False, False, None),
    ("eager AMP bf16", True, False, None),
    ("eager AMP bf16, fused AdamW", True, True, None),
    ("compile AMP bf16", True, True, "default"),
    ("compile AMP bf16, CUDA graphs", True, True, "reduce-overhead"),
]


def run_torch(batch, steps):
    generator = torch.Generator(device="cuda").manual_seed(2026)
    batches = [(torch.randn(batch, SIZES[0], device="cuda", generator=generator),
                torch.randint(0, 10, (batch,), device="cuda", generator=generator)) for _ in range(BATCHES_CYCLED)]
    results = {}
    for name, amp, fused, mode in VARIANTS:
        torch.manual_seed(1)
        model = mlp(SIZES).cuda()
        optimizer = adamw(model.parameters(), fused)
        if optimizer is None:
            print(f"{name}: skipped (no fused AdamW in torch {torch.__version__})", file=sys.stderr)
            continue
        if mode is not None:
            if not hasattr(torch, "compile"):
                print(f"{name}: skipped (torch {torch.__version__} has no torch.compile)", file=sys.stderr)
                continue
            model = torch.compile(model, mode=mode)
        step = make_step(model, optimizer, batches, amp)
        results[name] = samples_per_second(step, batch, steps, warmup=50 if mode else 20)
        median, best = results[name]
        print(f"torch {name:32s} batch {batch}: {median:10.0f} samples/s median, {best:10.0f} best")
        sys.stdout.flush()
    return results


def run_fusor(binary, batch, epochs, data, graph):
    """Samples/s of each epoch after the first, as fashion_mnist_mlp_cuda prints them."""
    command = [binary, "--batch", str(batch), "--epochs", str(epochs), "--quiet", "--device", "cuda"]
    if data:
        command += ["--data", data]
    if not graph:
        command.append("--no-graph")
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    print(output, end="")
    rates = [float(r) for r in re.findall(r"([0-9.]+) samples/s", output)]
    if len(rates) < 2:
        raise RuntimeError(f"expected samples/s for {epochs} epochs from {' '.join(command)}")
    return statistics.median(rates[1:]), max(rates[1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200, help="steps per timed run (default 200)")
    parser.add_argument("--fusor-binary", help="examples/fashion_mnist_mlp_cuda, run with and without --no-graph")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the fusor runs (the first is not counted)")
    parser.add_argument("--data", help="Fashion-MNIST directory for the fusor runs")
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        print("train_mlp_gpu.py: no CUDA GPU visible to torch; nothing measured", file=sys.stderr)
        sys.exit(77)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, batch {arguments.batch}")
    results = run_torch(arguments.batch, arguments.steps)
    if not arguments.fusor_binary:
        return
    fusor = {f"fusor bf16, {'CUDA graph' if graph else 'no graph'}":
             run_fusor(arguments.fusor_binary, arguments.batch, arguments.epochs, arguments.data, graph)
             for graph in (True, False)}
    peers = [name for name in ("eager AMP bf16", "compile AMP bf16", "compile AMP bf16, CUDA graphs")
             if name in results]
    print("\n| fusor | samples/s median / best | " + " | ".join(f"/ {p} (median)" for p in peers) + " |")
    print("|---|---|" + "---:|" * len(peers))
    for name, (median, best) in fusor.items():
        print(f"| {name} | {median:.0f} / {best:.0f} | "
              + " | ".join(f"{median / results[p][0]:.2f}" for p in peers) + " |")
    for p in results:
        print(f"| (PyTorch {p}) | {results[p][0]:.0f} / {results[p][1]:.0f} |" + " |" * len(peers))
    print("\nTarget (issue 4): fusor / eager AMP bf16 >= 2.")


if __name__ == "__main__":
    main()
