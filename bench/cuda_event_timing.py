"""How the PyTorch GPU comparison scripts time their work, as bench/cuda_timing.hpp
times fusor's: warm-up runs, then the median of timed runs, each between two
CUDA events on the current stream."""
import torch


def median_ms(work, warmup_runs, timed_runs):
    for _ in range(warmup_runs):
        work()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(timed_runs):
        start.record()
        work()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[timed_runs // 2]
