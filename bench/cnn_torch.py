#!/usr/bin/env python3
"""PyTorch on the CPU on the training step of bench/cnn_host.cpp, for comparison.

The network of examples/fashion_mnist_cnn.cpp: Conv2d(1, 32, 3, padding=1),
ReLU, MaxPool2d(2), Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2),
Flatten, Linear(3136, 128), ReLU, Dropout(0.25), Linear(128, 10); fp32,
batch 128. One step: zero_grad, forward, CrossEntropyLoss, backward,
torch.optim.AdamW(lr=1e-3, weight_decay=1e-4).step(). Inputs standard normal,
labels uniform (fixed seed), eight batches cycled. A warm-up, then
REPETITIONS runs of at least --min-seconds each; prints the median and the
best (min) mean step time of the runs, and samples/s.

Threads: torch.set_num_threads(--threads, default 2). Run both sides in the
same environment, e.g. OMP_WAIT_POLICY=passive.

Run: OMP_WAIT_POLICY=passive /usr/bin/python3 bench/cnn_torch.py
"""
import argparse
import statistics
import time

import torch

BATCH = 128
BATCHES_CYCLED = 8
REPETITIONS = 5


def model():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(2026)
    net = model()
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = [torch.randn(BATCH, 1, 28, 28) for _ in range(BATCHES_CYCLED)]
    labels = [torch.randint(0, 10, (BATCH,)) for _ in range(BATCHES_CYCLED)]

    def step(k):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(net(images[k]), labels[k])
        loss.backward()
        optimizer.step()

    for k in range(3):
        step(k)
    runs = []
    for _ in range(REPETITIONS):
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.min_seconds:
            step(steps % BATCHES_CYCLED)
            steps += 1
        runs.append((time.perf_counter() - start) / steps)
    median, best = statistics.median(runs), min(runs)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    print(f"cnn train step: median {median * 1e3:.2f} ms ({BATCH / median:.0f} samples/s), "
          f"best {best * 1e3:.2f} ms ({BATCH / best:.0f} samples/s)")


if __name__ == "__main__":
    main()
