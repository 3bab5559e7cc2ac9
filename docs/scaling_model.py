#!/usr/bin/env python3
"""docs/scaling_model.py — computes every table of docs/scaling.md.

An alpha-beta model of fusor's three parallel strategies on H100 SXM nodes
(8 GPUs per node, NVLink inside, one InfiniBand NDR NIC per GPU between nodes).
The constants below are assumptions, not measurements; change them to what
nccl-tests' all_reduce_perf reports on your machines and run again:

    python3 docs/scaling_model.py          # prints the markdown tables
"""
import math

# --- Assumptions (see docs/scaling.md, "Assumptions") ---------------------------
GPUS_PER_NODE = 8
NVLINK_BUSBW = 450e9          # bytes/s: all_reduce busbw of 8 GPUs in one node
NIC_BW = 50e9                 # bytes/s per GPU: NDR 400 Gb/s, one NIC per GPU
ALPHA_INTRA = 7.5e-6          # s per message inside a node (5-10 us)
ALPHA_INTER = 15e-6           # s per message between nodes (10-20 us)
ACHIEVED_FLOPS = 0.5 * 990e12 # bf16 dense: half of H100 SXM's peak
BUCKET_BYTES = 25e6           # gradient bucket (PyTorch DDP's default size)
GPU_COUNTS = (8, 64, 256, 1024)
GB = 1e9

# name: (parameters, global batch such models train with, in samples or tokens)
MODELS = {
    "MLP 784-512-256-10": (535_818, 128),  # examples/fashion_mnist_mlp: 128 images
    "1.3B transformer": (1.3e9, 1.0e6),    # GPT-3 XL: 1M-token batches
    "7B transformer": (7.0e9, 4.0e6),      # Llama 2 7B: 4M-token batches
}
# transformer shapes for tensor and pipeline parallelism: layers, hidden, sequence
SHAPES = {"1.3B": (24, 2048, 2048), "7B": (32, 4096, 4096)}


# --- Collectives ------------------------------------------------------------------
def dp_busbw(n):
    """all_reduce bus bandwidth of n GPUs that fill whole nodes (pure data parallel).
    Across nodes NCCL runs one ring (channel) per NIC, so each GPU's NIC carries
    1/8 of the data: the node's 8 NICs together bound the bus bandwidth."""
    if n <= GPUS_PER_NODE:
        return NVLINK_BUSBW
    return min(NVLINK_BUSBW, GPUS_PER_NODE * NIC_BW)


def ring_latency(n, alpha_intra=ALPHA_INTRA, alpha_inter=ALPHA_INTER):
    """A pipelined ring: a chunk travels 2(n-1) hops, 2(nodes-1) of them between nodes
    (the hop count NCCL's own tuning model uses)."""
    nodes = max(1, n // GPUS_PER_NODE)
    inter_hops = 2 * (nodes - 1)
    return (2 * (n - 1) - inter_hops) * alpha_intra + inter_hops * alpha_inter


def tree_latency(n):
    """NCCL's tree: a chain inside each node, a binary tree between nodes, up and down."""
    nodes = max(1, n // GPUS_PER_NODE)
    return 2 * (math.ceil(math.log2(nodes)) * ALPHA_INTER
                + (min(n, GPUS_PER_NODE) - 1) * ALPHA_INTRA)


def all_reduce_bandwidth_time(nbytes, n, busbw):
    return 2 * (n - 1) / n * nbytes / busbw


def dp_step_comm(nbytes, n, algorithm, bucket_bytes=BUCKET_BYTES):
    """Per-step gradient all-reduce of nbytes in buckets: bandwidth once, latency per bucket."""
    buckets = max(1, math.ceil(nbytes / bucket_bytes))
    latency = ring_latency(n) if algorithm == "ring" else tree_latency(n)
    return all_reduce_bandwidth_time(nbytes, n, dp_busbw(n)) + buckets * latency, buckets


# --- Formatting -------------------------------------------------------------------
def duration(seconds):
    if seconds >= 1:
        return f"{seconds:.3g} s"
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def size(nbytes):
    return f"{nbytes / GB:.3g} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.3g} MB"


def count(x):
    return f"{x / 1e6:.3g}M" if x >= 1e6 else (f"{x / 1e3:.3g}k" if x >= 1e3 else f"{x:.3g}")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    print("\n".join(lines) + "\n")


# --- Tables -----------------------------------------------------------------------
def data_parallel():
    print("### Data parallel: gradient all-reduce per step\n")
    rows = []
    for name, (params, batch_used) in MODELS.items():
        for n in GPU_COUNTS:
            fp32 = min(dp_step_comm(4 * params, n, a)[0] for a in ("ring", "tree"))
            bf16_ring, buckets = dp_step_comm(2 * params, n, "ring")
            bf16_tree, _ = dp_step_comm(2 * params, n, "tree")
            best = min(bf16_ring, bf16_tree)
            # backward is 2/3 of 6 * params * tokens: 4 * params FLOPs per token
            tokens_per_gpu = best * ACHIEVED_FLOPS / (4 * params)
            global_batch = tokens_per_gpu * n
            mark = " **>**" if global_batch > batch_used else ""
            rows.append([name if n == GPU_COUNTS[0] else "", n, buckets, duration(fp32), duration(bf16_ring),
                         duration(bf16_tree), duration(best), count(tokens_per_gpu),
                         count(global_batch) + mark, count(batch_used) if n == GPU_COUNTS[0] else ""])
    table(["model", "GPUs", "bf16 buckets", "fp32, best", "bf16, ring", "bf16, tree",
           "backward >= (bf16 best)", "per GPU", "global batch", "batch used"], rows)
    # 2(n-1)/n -> 2: tokens per GPU whose backward lasts as long as the bandwidth term
    hide = {b: 2 * b / dp_busbw(64) * ACHIEVED_FLOPS / 4 for b in (2, 4)}
    print(f"Bandwidth term alone, n large: tokens per GPU to hide >= {hide[2]:.0f} (bf16), "
          f"{hide[4]:.0f} (fp32).")
    params = MODELS["7B transformer"][0]
    for bucket in (25e6, 200e6):
        t, buckets = dp_step_comm(2 * params, 1024, "tree", bucket)
        print(f"7B, bf16, 1024 GPUs, tree, {bucket / 1e6:.0f} MB buckets ({buckets}): {duration(t)}, "
              f"{t * ACHIEVED_FLOPS / (4 * params):.0f} tokens per GPU to hide, "
              f"last bucket exposed >= {duration(all_reduce_bandwidth_time(bucket, 1024, dp_busbw(1024)) + tree_latency(1024))}")
    print()


def zero_memory():
    print("### ZeRO-1: parameters, gradients and AdamW state per GPU (bf16 network)\n")
    rows = []
    for name in ("1.3B transformer", "7B transformer"):
        params = MODELS[name][0]
        plain = 16 * params
        rows.append([name, f"{plain / GB:.1f}"] + [f"{(4 * params + 12 * params / n) / GB:.1f}" for n in GPU_COUNTS])
    table(["model", "plain DP, GB"] + [f"ZeRO-1 n={n}" for n in GPU_COUNTS], rows)


def layer_compute(layers_share, hidden, seq, micro_batch, tp):
    """Forward + backward FLOP time of layers_share transformer layers on one GPU."""
    forward = 24 * micro_batch * seq * hidden**2 + 4 * micro_batch * seq**2 * hidden
    return layers_share * 3 * forward / tp / ACHIEVED_FLOPS


def tensor_parallel():
    print("### Tensor parallel: per transformer layer, micro-batch 1 (4 all-reduces: 2 per block)\n")
    rows = []
    for name, (layers, hidden, seq) in SHAPES.items():
        nbytes = seq * hidden * 2
        for tp in (2, 4, 8):
            compute = layer_compute(1, hidden, seq, 1, tp)
            nv = 4 * (all_reduce_bandwidth_time(nbytes, tp, NVLINK_BUSBW) + ring_latency(tp))
            # stretched over tp nodes, one GPU each: every hop crosses the network
            ib = 4 * (all_reduce_bandwidth_time(nbytes, tp, NIC_BW) + ring_latency(tp, alpha_intra=ALPHA_INTER))
            first = tp == 2
            rows.append([name if first else "", f"{hidden}/{seq}" if first else "", size(nbytes) if first else "", tp,
                         duration(compute), duration(nv), f"{nv / compute:.0%}", duration(ib), f"{ib / compute:.0%}"])
    table(["model", "hidden/seq", "bytes per all-reduce", "TP", "compute", "comm NVLink",
           "/compute", "comm IB", "/compute"], rows)


def pipeline():
    print("### Pipeline: bubble (p-1)/m, and the idle share of the step (p-1)/(m+p-1)\n")
    micro_batches = (4, 8, 16, 32, 64)
    rows = []
    for p in (2, 4, 8, 16):
        rows.append([p] + [f"{(p - 1) / m:.3g} ({(p - 1) / (m + p - 1):.0%})" + ("*" if m < p else "")
                           for m in micro_batches])
    table(["p \\ m"] + [str(m) for m in micro_batches], rows)

    print("### Pipeline: 7B, micro-batch 1, per stage and micro-batch\n")
    layers, hidden, seq = SHAPES["7B"]
    nbytes = seq * hidden * 2
    activation = 34 * seq * hidden  # bytes per layer (Korthikanti et al., flash attention)
    rows = []
    for p in (2, 4, 8, 16):
        compute = layer_compute(layers / p, hidden, seq, 1, 1)
        p2p = 2 * (nbytes / NIC_BW + ALPHA_INTER)  # activations forward, gradients backward
        per_micro = activation * layers / p
        rows.append([p, duration(compute), size(nbytes), duration(p2p), f"{p2p / compute:.1%}",
                     size(per_micro), size(32 * per_micro), size(p * per_micro)])
    table(["p", "compute", "p2p bytes each way", "p2p over IB", "/compute",
           "activations", "GPipe m=32", "1F1B"], rows)


def three_d():
    """GPT-3 175B on 1024 GPUs: a data x tensor x pipeline mesh, and ZeRO-3 alone."""
    layers, hidden, seq = 96, 12288, 2048
    params = 12 * layers * hidden**2            # 174B (embeddings aside)
    batch = 1536                                # sequences per step (GPT-3's 3.2M tokens)
    gpus = 1024
    print("### GPT-3 175B on 1024 GPUs: where a step's time goes\n")
    rows = []
    for t, p in ((8, 16), (8, 8), (4, 32)):
        d = gpus // (t * p)
        m = batch // d                          # micro-batches of 1 sequence per replica
        compute = layer_compute(layers / p, hidden, seq, 1, t)
        act = seq * hidden * 2                  # one sequence's activations, bf16
        tp = 4 * (layers / p) * (all_reduce_bandwidth_time(act, t, NVLINK_BUSBW) + ring_latency(t))
        pp = 2 * (act / t / NIC_BW + ALPHA_INTER)  # each tensor rank sends its slice (sequence-parallel style)
        micro = compute + tp + pp
        dp_bytes = 2 * params / (t * p)         # this rank's bf16 gradients
        dp = all_reduce_bandwidth_time(dp_bytes, d, NIC_BW) + ring_latency(d, alpha_intra=ALPHA_INTER)
        step = (m + p - 1) * micro + dp
        useful = m * compute
        rows.append([f"{d} x {t} x {p}", m, duration(step), f"{useful / step:.0%}",
                     f"{(p - 1) * micro / step:.1%}", f"{m * tp / step:.1%}", f"{m * pp / step:.1%}",
                     f"{dp / step:.1%}", f"{16 * params / (t * p) / GB:.0f} GB"])
    table(["data x tensor x pipeline", "micro-batches", "step", "compute", "bubble", "TP comm", "PP p2p",
           "DP all-reduce", "state per GPU (no ZeRO)"], rows)

    tokens_per_gpu = batch * seq / gpus
    compute = 6 * params * tokens_per_gpu / ACHIEVED_FLOPS
    moved = 3 * 2 * params * (gpus - 1) / gpus  # all-gather forward, again backward, reduce-scatter, bf16
    comm = moved / (GPUS_PER_NODE * NIC_BW)      # the node's NICs shared by its 8 GPUs' rings
    latency = 3 * layers * ring_latency(gpus)
    print(f"ZeRO-3 alone (1024-way data parallel, parameters gathered per layer, bf16): "
          f"compute {duration(compute)} per step ({tokens_per_gpu:.0f} tokens a GPU); "
          f"{size(moved)} moved per GPU, {duration(comm)} at {GPUS_PER_NODE * NIC_BW / GB:.0f} GB/s, "
          f"plus {duration(latency)} of ring latency ({3 * layers} collectives); "
          f"state {16 * params / gpus / GB:.1f} GB a GPU. Hidden behind compute only if each layer's gather "
          f"({size(2 * params / layers)}) is prefetched one layer ahead and the ring's latency is replaced by a "
          f"tree's ({duration(3 * layers * tree_latency(gpus))}).\n")


def small_model():
    params = MODELS["MLP 784-512-256-10"][0]
    t8, _ = dp_step_comm(4 * params, 8, "ring")
    samples = t8 * ACHIEVED_FLOPS / (4 * params)
    print(f"MLP: fp32 all-reduce at 8 GPUs {duration(t8)}, of which bandwidth "
          f"{duration(all_reduce_bandwidth_time(4 * params, 8, NVLINK_BUSBW))}; "
          f"backward of one sample {4 * params / ACHIEVED_FLOPS * 1e9:.2f} ns at {ACHIEVED_FLOPS / 1e12:.0f} TFLOP/s; "
          f"samples per GPU to hide: {samples:.0f}.\n")
    for n in (256, 1024):
        print(f"ring latency per all-reduce at {n}: {duration(ring_latency(n))}, tree: {duration(tree_latency(n))}")
    print()


if __name__ == "__main__":
    data_parallel()
    zero_memory()
    tensor_parallel()
    pipeline()
    three_d()
    small_model()
