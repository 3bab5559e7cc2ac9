#!/usr/bin/env python3
"""examples/bad_input_test.py BUILD_EXAMPLES_DIR — every example given bad input.

One table: for each case, the program, its arguments, the exit status the
examples document (2 the command line, 1 the data or a checkpoint), a text the
error must contain (the option, file or key at fault), and whether the error
must come before any training (no epoch, step or validation line printed
before it). After every case no temporary file may be left in the checkpoint
folder. The bad files (truncated or corrupt gzip, swapped image and label files,
a label out of range, a checkpoint of another model or without its metadata)
are made here, from the real data set and a real checkpoint.

Run by ctest (example_bad_input); prints one line per case and a summary, and
exits 1 when any case fails.
"""
import gzip
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

FASHION = os.environ.get("FUSOR_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
FILES = {"train-images": "train-images-idx3-ubyte.gz", "train-labels": "train-labels-idx1-ubyte.gz",
         "test-images": "t10k-images-idx3-ubyte.gz", "test-labels": "t10k-labels-idx1-ubyte.gz"}
# Lines that mean training has begun: an epoch's summary or progress bar, a GPT step or validation.
TRAINING_STARTED = re.compile(r"(^|\r)epoch \d|step \d+/\d+|validation loss|^fusor (Fashion-MNIST|GPT|pipeline)", re.M)
SMALL = ["--train-limit", "256", "--test-limit", "100", "--epochs", "1", "--quiet"]


def data_copy(root, name, change=None):
    """A copy of Fashion-MNIST in root/name; change(folder) spoils it."""
    folder = os.path.join(root, name)
    os.makedirs(folder)
    for f in FILES.values():
        shutil.copy(os.path.join(FASHION, f), folder)
    if change:
        change(folder)
    return folder


def truncate(file, keep):
    with open(file, "rb") as f:
        data = f.read()
    with open(file, "wb") as f:
        f.write(data[:keep])


def corrupt_middle(file):
    with open(file, "rb") as f:
        data = bytearray(f.read())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0xA5
    with open(file, "wb") as f:
        f.write(data)


def swap(folder):
    a, b = os.path.join(folder, FILES["train-images"]), os.path.join(folder, FILES["train-labels"])
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)


def label_out_of_range(folder):
    path = os.path.join(folder, FILES["train-labels"])
    with gzip.open(path, "rb") as f:
        data = bytearray(f.read())
    data[8 + 17] = 11  # the 18th label: 11 of 10 classes
    with gzip.open(path, "wb") as f:
        f.write(data)


def narrower_test_images(folder):
    """Test images of 28 x 27 pixels (each row's last pixel dropped)."""
    path = os.path.join(folder, FILES["test-images"])
    with gzip.open(path, "rb") as f:
        data = f.read()
    count = struct.unpack(">I", data[4:8])[0]
    pixels = b"".join(data[16 + r * 28:16 + r * 28 + 27] for r in range(count * 28))
    with gzip.open(path, "wb") as f:
        f.write(data[:4] + struct.pack(">III", count, 28, 27) + pixels)


def no_test_images(folder):
    """A test set of 0 images and 0 labels."""
    with gzip.open(os.path.join(folder, FILES["test-images"]), "wb") as f:
        f.write(bytes([0, 0, 8, 3]) + struct.pack(">III", 0, 28, 28))
    with gzip.open(os.path.join(folder, FILES["test-labels"]), "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + struct.pack(">I", 0))


def two_gzip_members(folder):
    """The training labels as two gzip members one after another (as `cat a.gz b.gz` makes): valid gzip."""
    path = os.path.join(folder, FILES["train-labels"])
    with gzip.open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(gzip.compress(data[:1000]) + gzip.compress(data[1000:]))


def safetensors_with(path, tensors, metadata):
    """A safetensors file: tensors {name: (dtype, shape, bytes)} and string metadata."""
    header, offset, blob = {"__metadata__": metadata}, 0, b""
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob)


def rewrite_metadata(source, target, change):
    """A copy of checkpoint `source` whose metadata change(dict) edits."""
    with open(source, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    change(header.setdefault("__metadata__", {}))
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(target, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def small_file_limit():
    """In the child: files of at most 1 MB (a full disk, as far as a save can tell)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def main():
    bin_dir = sys.argv[1]
    root = tempfile.mkdtemp(prefix="fusor_bad_input_")
    saves = os.path.join(root, "saves")
    os.makedirs(saves)

    def program(name):
        return os.path.join(bin_dir, name)

    mlp, cnn, gpt = program("fashion_mnist_mlp"), program("fashion_mnist_cnn"), program("gpt_char")
    dp, pipe, tp = program("fashion_mnist_data_parallel"), program("pipeline_mlp"), program("tensor_parallel_mlp")
    custom = program("custom_fused_layer")

    # A real checkpoint of the MLP, and copies of it spoiled.
    good = os.path.join(root, "mlp.safetensors")
    made = subprocess.run([mlp, *SMALL, "--checkpoint", good], capture_output=True, text=True, timeout=300)
    if made.returncode != 0 or not os.path.exists(good):
        print("bad_input_test: could not make the MLP checkpoint:\n" + made.stdout + made.stderr)
        return 1
    no_epoch = os.path.join(root, "no-epoch.safetensors")
    rewrite_metadata(good, no_epoch, lambda m: m.pop("epoch"))
    text_epoch = os.path.join(root, "text-epoch.safetensors")
    rewrite_metadata(good, text_epoch, lambda m: m.update(epoch="three"))
    other_model = os.path.join(root, "other-model.safetensors")
    safetensors_with(other_model, {"0.weight": ("F32", [3, 2], bytes(24))}, {"epoch": "1", "fusor.steps_taken": "1"})
    garbage = os.path.join(root, "corrupt-checkpoint.safetensors")
    with open(garbage, "w") as f:
        f.write("not a checkpoint")
    writable_file = os.path.join(root, "a-file")
    open(writable_file, "w").close()

    # A GPT checkpoint of 2 steps, with its step spoiled, and a text too short for a window of 128 + 1.
    gpt_good = os.path.join(root, "gpt.safetensors")
    made = subprocess.run([gpt, "--steps", "2", "--eval-every", "2", "--eval-batches", "1", "--generate", "0", "--quiet",
                           "--checkpoint", gpt_good], capture_output=True, text=True, timeout=300)
    if made.returncode != 0 or not os.path.exists(gpt_good):
        print("bad_input_test: could not make the GPT checkpoint:\n" + made.stdout + made.stderr)
        return 1
    gpt_later = os.path.join(root, "gpt-step-5000.safetensors")
    rewrite_metadata(gpt_good, gpt_later, lambda m: m.update(step="5000"))
    gpt_negative = os.path.join(root, "gpt-step-minus-5.safetensors")
    rewrite_metadata(gpt_good, gpt_negative, lambda m: m.update(step="-5"))
    short_text = os.path.join(root, "short.txt")
    with open(short_text, "w") as f:
        f.write("To be, or not to be.\n" * 48)  # 1008 characters: the last 100 for validation

    # A distributed save of the data-parallel program (one rank), after its only epoch.
    dp_saves = os.path.join(root, "dp-saves")
    made = subprocess.run([dp, *SMALL, "--checkpoint", dp_saves], capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        print("bad_input_test: could not make the data-parallel save:\n" + made.stdout + made.stderr)
        return 1

    cases = [
        # program, arguments, status, text, before training, preexec
        (mlp, ["--epoch", "2"], 2, "unknown option --epoch (did you mean --epochs?)"),
        (mlp, ["--epochs", "abc"], 2, "--epochs abc: 'abc' is not a whole number (accepted: 1 to 100000)"),
        (mlp, ["--epochs", "1x"], 2, "'1x' is not a whole number"),
        (mlp, ["--epochs", "0"], 2, "--epochs 0: out of range"),
        (mlp, ["--epochs"], 2, "--epochs needs a value"),
        (mlp, ["--lr", "nan"], 2, "--lr nan: 'nan' is not finite"),
        (mlp, ["--lr", "-1"], 2, "--lr -1: out of range (accepted: above 0, up to 10)"),
        (mlp, ["--lr", "inf"], 2, "not finite"),
        (mlp, ["--batch", "0"], 2, "--batch 0: out of range"),
        (mlp, ["--train-limit", "-5"], 2, "--train-limit -5: out of range (accepted: 0 to 60000)"),
        (mlp, ["--seed", "-1"], 2, "--seed -1"),
        (mlp, ["--require-accuracy", "2"], 2, "--require-accuracy 2: out of range"),
        (mlp, ["--device", "gpu"], 2, "'gpu' is not one of auto|host|cuda"),
        (mlp, ["--resume"], 2, "--resume needs --checkpoint"),
        (mlp, ["--checkpoint", "--resume"], 2, "--checkpoint needs a value"),
        (mlp, ["--batch", "500", "--train-limit", "100"], 2, "smaller than one batch (500)"),
        (mlp, ["--data", os.path.join(root, "nowhere")], 1, "apt-get install dataset-fashion-mnist"),
        (mlp, ["--data", writable_file], 1, "a-file"),
        (mlp, ["--data", data_copy(root, "truncated", lambda d: truncate(os.path.join(d, FILES["train-images"]), 5000))],
         1, "train-images-idx3-ubyte.gz"),
        (mlp, ["--data", data_copy(root, "corrupt", lambda d: corrupt_middle(os.path.join(d, FILES["test-images"])))],
         1, "t10k-images-idx3-ubyte.gz"),
        (mlp, ["--data", data_copy(root, "swapped", swap)], 1, "train-"),
        (mlp, ["--data", data_copy(root, "label11", label_out_of_range)], 1, "label"),
        (mlp, ["--checkpoint", os.path.join(root, "missing", "m.safetensors")], 1, "/missing' does not exist"),
        (mlp, ["--checkpoint", saves], 1, "is a folder; give the checkpoint file's name"),
        (mlp, ["--checkpoint", "/proc/m.safetensors"], 1, "cannot create a file in '/proc'"),
        (mlp, ["--checkpoint", os.path.join(saves, "m.safetensors")], 1, "the file-size limit (ulimit -f) is 1048576 bytes",
         True, small_file_limit),
        (mlp, ["--metrics", os.path.join(root, "missing", "m.csv")], 1, "metrics destination '"),
        (mlp, ["--metrics", saves], 1, "is a folder; give the metrics file's name"),
        (mlp, ["--checkpoint", other_model, "--resume"], 1, "other-model.safetensors"),
        (mlp, ["--checkpoint", garbage, "--resume"], 1, "corrupt-checkpoint.safetensors"),
        (mlp, ["--checkpoint", no_epoch, "--resume"], 1, "has no metadata 'epoch'"),
        (mlp, ["--checkpoint", text_epoch, "--resume"], 1, "metadata 'epoch' should be a whole number, but 'three'"),
        (mlp, ["--checkpoint", good, "--resume", "--epochs", "1", "--require-accuracy", "1"], 1, "below the required",
         False),
        (mlp, ["--data", data_copy(root, "narrow", narrower_test_images)], 1,
         "the test set in '" + os.path.join(root, "narrow") + "' holds images of 28 x 27 pixels"),
        (mlp, ["--data", data_copy(root, "no-test", no_test_images)], 1, "holds no images"),
        (mlp, ["--data", data_copy(root, "members", two_gzip_members)], 0, "final test accuracy", False),
        (cnn, ["--batch", "-3"], 2, "--batch -3: out of range"),
        (gpt, ["--top-k", "500"], 2, "--top-k 500: out of range (accepted: 0 to 96)"),
        (gpt, ["--temperature", "0"], 2, "--temperature 0: out of range"),
        (gpt, ["--steps", "-1"], 2, "--steps -1"),
        (gpt, ["--model", "huge"], 2, "'huge' is not one of small|nanogpt"),
        (gpt, ["--prompt", ""], 2, "--prompt"),
        (gpt, ["--data", os.path.join(root, "no-corpus.txt")], 1, "no-corpus.txt"),
        (gpt, ["--data", short_text], 1, "short.txt: its validation part holds 100 tokens"),
        (gpt, ["--checkpoint", gpt_later, "--resume"], 2, "was saved at step 5000, beyond the --steps 2", False),
        (gpt, ["--checkpoint", gpt_negative, "--resume"], 1, "metadata 'step' is -5", False),
        (gpt, ["--steps", "0", "--require-below-baseline", "0.1"], 2, "--require-below-baseline needs training steps"),
        (gpt, ["--prompt", "caf\u00e9"], 2, "--prompt: character 195 is outside the vocabulary"),
        (gpt, ["--data", root], 1, "is a folder; give the text file's path"),
        # Resumed at its last step: the saved model is measured, not a NaN (far above the baseline after 2 steps).
        (gpt, ["--checkpoint", gpt_good, "--resume", "--require-below-baseline", "0.01"], 1, "step 2  validation loss",
         False),
        (dp, ["--powersgd", "0"], 2, "--powersgd 0: out of range (accepted: 1 to 256)"),
        (dp, ["--powersgd", "2", "--bf16-communication"], 2, "exclude each other"),
        (dp, ["--micro-batches", "3"], 2, "must be a multiple of ranks x micro-batches (3)"),
        (dp, ["--bucket-bytes", "0"], 2, "--bucket-bytes 0"),
        (dp, ["--checkpoint", writable_file], 1, "is a file; this program saves into a folder"),
        # Resumed after its last epoch: the saved network's accuracy, not 0%.
        (dp, ["--checkpoint", dp_saves, "--resume", "--require-accuracy", "0.3"], 0, "final test accuracy", False),
        (dp, ["--checkpoint", saves, "--metrics", saves], 2, "are the same path"),
        (pipe, ["--stage-map", "0,1"], 2, "--stage-map needs 1 first layers"),
        (pipe, ["--schedule", "zigzag"], 2, "'zigzag' is not one of 1f1b|gpipe"),
        (pipe, ["--micro-batches", "5"], 2, "--micro-batches 5 does not divide --batch 128"),
        (tp, ["--epochs", "-2"], 2, "--epochs -2"),
        (tp, ["--batch", "300", "--train-limit", "200"], 2, "smaller than one batch (300)"),
        (tp, ["--checkpoint", os.path.join(root, "missing", "saves")], 1, "/missing' does not exist"),
        (custom, ["--x"], 2, "unknown option --x"),
    ]

    failures = 0
    for case in cases:
        exe, args, want_status, want_text = case[:4]
        before_training = case[4] if len(case) > 4 else True
        preexec = case[5] if len(case) > 5 else None
        if not os.path.exists(exe):
            print(f"FAILED  {os.path.basename(exe)}: not built")
            failures += 1
            continue
        full = [exe, *args] if exe == custom or "--train-limit" in args else [exe, *SMALL, *args]
        if exe == gpt:
            full = [exe, "--steps", "2", "--eval-every", "1", "--eval-batches", "1", "--generate", "0", "--quiet", *args]
        run = subprocess.run(full, capture_output=True, text=True, timeout=300, preexec_fn=preexec)
        output = run.stdout + run.stderr
        problems = []
        if run.returncode != want_status:
            problems.append(f"exit status {run.returncode}, expected {want_status}")
        if want_text not in output:
            problems.append(f"the output does not say '{want_text}'")
        error_at = output.find("error:")
        if before_training and TRAINING_STARTED.search(run.stdout):
            problems.append("training started before the error")
        if before_training and error_at < 0 and "failed:" not in output:
            problems.append("no 'error:' line")
        leftovers = [f for f in os.listdir(saves) if ".tmp." in f or f.startswith(".fusor-probe")]
        if leftovers:
            problems.append(f"temporary files left: {leftovers}")
        shown = " ".join(a if a else "''" for a in args)
        if problems:
            failures += 1
            print(f"FAILED  {os.path.basename(exe)} {shown}: " + "; ".join(problems))
            print("        output: " + output.strip().replace("\n", "\n        "))
        else:
            last = [line for line in output.strip().splitlines() if line.strip()][-1]
            print(f"ok      {os.path.basename(exe)} {shown} -> {run.returncode}: {last.strip()[:150]}")
    # Nothing lost: a refused command leaves the files of an earlier run as they were.
    same = os.path.join(root, "same.safetensors")
    shutil.copy(good, same)
    earlier_csv = os.path.join(root, "earlier.csv")
    with open(earlier_csv, "w") as f:
        f.write("epoch,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_second,seconds\n"
                "1,0.9,0.7,0.8,0.72,1000.0,1.0\n2,0.6,0.8,0.6,0.79,1000.0,1.0\n")
    keeps = [
        ([mlp, *SMALL, "--checkpoint", same, "--metrics", same], 2, same),
        ([mlp, *SMALL, "--data", os.path.join(root, "nowhere"), "--metrics", earlier_csv], 1, earlier_csv),
        ([mlp, *SMALL, "--checkpoint", os.path.join(root, "missing", "c.safetensors"), "--metrics", earlier_csv], 1,
         earlier_csv),
        ([dp, *SMALL, "--batch", "500", "--metrics", earlier_csv], 2, earlier_csv),
    ]
    for full, want_status, kept in keeps:
        with open(kept, "rb") as f:
            before = f.read()
        run = subprocess.run(full, capture_output=True, text=True, timeout=300)
        with open(kept, "rb") as f:
            after = f.read()
        shown = f"{os.path.basename(full[0])} {' '.join(full[len(SMALL) + 1:])}"
        if run.returncode != want_status or after != before:
            failures += 1
            print(f"FAILED  {shown}: exit status {run.returncode} (expected {want_status}); "
                  f"{os.path.basename(kept)} {'kept' if after == before else 'CHANGED'}")
        else:
            print(f"ok      {shown} -> {run.returncode}; {os.path.basename(kept)} kept")
    shutil.rmtree(root, ignore_errors=True)
    total = len(cases) + len(keeps)
    print(f"bad_input_test: {total - failures} of {total} cases as documented")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
