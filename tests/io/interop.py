"""Checks fusor's safetensors files against the reference implementation.

Run by tests/io/test_interop.cpp (ctest io_interop_host); needs numpy and the
`safetensors` package, and fails (never skips) without them.

  interop.py check-numpy FILE EXPECTED  safetensors.numpy.load_file reads FILE; every
                                        tensor and metadata entry equals EXPECTED
  interop.py check-raw FILE EXPECTED    the same through safetensors.deserialize, for
                                        dtypes numpy lacks (BF16); also through
                                        safetensors.torch where PyTorch is installed
  interop.py write FILE EXPECTED        safetensors.numpy.save_file writes random
                                        tensors to FILE, their values to EXPECTED

EXPECTED is text, one line per tensor, tab-separated:
  tensor <name> <DTYPE> <comma-separated shape> <space-separated values>
  meta <key> <value>
Floating-point values are written exactly (%.17g of the stored value).
"""
import sys

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


def read_expected(path):
    tensors, metadata = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            fields = line.split("\t")
            if fields[0] == "meta":
                metadata[fields[1]] = fields[2]
                continue
            _, name, dtype, shape, values = fields
            shape = tuple(int(e) for e in shape.split(",")) if shape else ()
            number = float if dtype.startswith(("F", "BF")) else int
            tensors[name] = (dtype, shape, [number(v) for v in values.split()])
    return tensors, metadata


def values_of(array):
    """Exact Python numbers: ints for integer and bool arrays, floats otherwise."""
    array = np.asarray(array)
    if array.dtype.kind in "iub":
        return [int(x) for x in array.ravel().tolist()]
    return [float(x) for x in array.astype(np.float64).ravel()]


def compare(name, dtype, shape, values, expected, failures):
    want_dtype, want_shape, want_values = expected[name]
    if dtype != want_dtype:
        failures.append(f"{name}: dtype {dtype}, expected {want_dtype}")
    if tuple(shape) != want_shape:
        failures.append(f"{name}: shape {tuple(shape)}, expected {want_shape}")
    if values != want_values:
        bad = next((i for i, (a, b) in enumerate(zip(values, want_values)) if a != b), min(len(values), len(want_values)))
        failures.append(f"{name}: values differ first at flat index {bad} ({len(values)} vs {len(want_values)} values)")


def finish(failures, checked, what):
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"ok: {checked} tensors {what} (safetensors {safetensors.__version__}, numpy {np.__version__})")


def check_numpy(path, expected_path):
    expected, metadata = read_expected(expected_path)
    loaded = load_file(path)
    names = {v: k for k, v in NUMPY_DTYPES.items()}
    failures = []
    if set(loaded) != set(expected):
        failures.append(f"tensor names {sorted(loaded)}, expected {sorted(expected)}")
    for name, array in loaded.items():
        if name in expected:
            compare(name, names.get(array.dtype.type, str(array.dtype)), array.shape, values_of(array), expected, failures)
    with safe_open(path, framework="numpy") as f:
        if (f.metadata() or {}) != metadata:
            failures.append(f"metadata {f.metadata()}, expected {metadata}")
    finish(failures, len(loaded), "read by safetensors.numpy.load_file")


def bf16_values(raw):
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return values_of(bits.view(np.float32))


def check_raw(path, expected_path):
    expected, metadata = read_expected(expected_path)
    with open(path, "rb") as f:
        content = f.read()
    failures = []
    entries = dict(safetensors.deserialize(content))
    if set(entries) != set(expected):
        failures.append(f"tensor names {sorted(entries)}, expected {sorted(expected)}")
    for name, info in entries.items():
        dtype = info["dtype"].upper()
        dtype = {"BFLOAT16": "BF16", "FLOAT32": "F32", "FLOAT64": "F64", "FLOAT16": "F16"}.get(dtype, dtype)
        raw = bytes(info["data"])
        values = bf16_values(raw) if dtype == "BF16" else values_of(np.frombuffer(raw, dtype=NUMPY_DTYPES[dtype]))
        if name in expected:
            compare(name, dtype, info["shape"], values, expected, failures)
    with safe_open(path, framework="numpy") as f:
        if (f.metadata() or {}) != metadata:
            failures.append(f"metadata {f.metadata()}, expected {metadata}")
    try:
        import torch
        from safetensors.torch import load_file as torch_load_file
    except ImportError:
        print("PyTorch is not installed: the extra safetensors.torch check did not run")
    else:
        torch_names = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                       torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                       torch.uint8: "U8", torch.bool: "BOOL"}
        for name, t in torch_load_file(path).items():
            array = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
            compare(name, torch_names[t.dtype], tuple(t.shape), values_of(array), expected, failures)
        print(f"safetensors.torch.load_file (PyTorch {torch.__version__}) read the same values")
    finish(failures, len(entries), "read by safetensors.deserialize")


def write(path, expected_path):
    rng = np.random.default_rng(20240611)
    floats = lambda shape, dtype: (rng.uniform(-100, 100, shape)).astype(dtype)
    ints = lambda shape, dtype: rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype=dtype,
                                             endpoint=True)
    tensors = {
        "f64_vector": floats((11,), np.float64),
        "f32_matrix": floats((4, 6), np.float32),
        "f16_cube": floats((2, 3, 4), np.float16),
        "i64_matrix": ints((3, 2), np.int64),
        "i32_vector": ints((9,), np.int32),
        "i16_image": ints((1, 2, 3, 2), np.int16),
        "i8_matrix": ints((5, 3), np.int8),
        "u8_vector": ints((13,), np.uint8),
        "bool_matrix": rng.integers(0, 2, (3, 3)).astype(np.bool_),
        "f32_scalar": np.array(rng.uniform(-1, 1), dtype=np.float32),
        "i32_empty": np.zeros((0, 5), dtype=np.int32),
    }
    metadata = {"framework": "numpy", "note": "written by safetensors.numpy.save_file", "unicode": "\u03bb \u2200 \U0001F600"}
    save_file(tensors, path, metadata=metadata)
    names = {v: k for k, v in NUMPY_DTYPES.items()}
    with open(expected_path, "w", encoding="utf-8") as f:
        for name, array in tensors.items():
            dtype = names[array.dtype.type]
            values = " ".join(repr(v) for v in values_of(array))
            f.write(f"tensor\t{name}\t{dtype}\t{','.join(str(e) for e in array.shape)}\t{values}\n")
        for key, value in metadata.items():
            f.write(f"meta\t{key}\t{value}\n")
    print(f"ok: wrote {len(tensors)} tensors with safetensors {safetensors.__version__}")


if __name__ == "__main__":
    mode, path, expected_path = sys.argv[1:4]
    {"check-numpy": check_numpy, "check-raw": check_raw, "write": write}[mode](path, expected_path)
