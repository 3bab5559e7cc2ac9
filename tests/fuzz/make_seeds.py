#!/usr/bin/env python3
"""tests/fuzz/make_seeds.py — writes the committed seed corpus of each fuzz
target (tests/fuzz/corpus/<target>/): small valid inputs, and a few broken
ones, that let libFuzzer start from the formats' real structure. Run it again
only to change the seeds; its output is committed."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> the file's bytes (header padded to 8)."""
    header, offset, body = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        body += data
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def idx(type_code, shape, data):
    return bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", s) for s in shape) + data


f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
files = {
    "one_f32": safetensors([("w", "F32", [2, 3], f32)]),
    "scalar_and_metadata": safetensors([("step", "I64", [], struct.pack("<q", 7))], {"epoch": "3", "mesh": "2x2x2"}),
    "every_dtype": safetensors([
        ("a", "F64", [2], struct.pack("<2d", 1.5, -2)),
        ("b", "F16", [2, 1], b"\x00\x3c\x00\xc0"),
        ("c", "BF16", [1, 2], b"\x80\x3f\x00\xc0"),
        ("d", "I32", [3], struct.pack("<3i", 1, -2, 3)),
        ("e", "I16", [1], struct.pack("<h", -4)),
        ("f", "I8", [2], b"\x01\xff"),
        ("g", "U8", [2, 2], b"\x00\x01\x02\x03"),
        ("h", "BOOL", [2], b"\x00\x01"),
        ("i", "F32", [2, 2, 2], struct.pack("<8f", *range(8))),
    ]),
    "empty_dimension": safetensors([("z", "F32", [0, 4], b"")]),
}
for name, data in files.items():
    put("safetensors", name, data)
    put("checkpoint_reader", name, data)
    put("json", name, data[8:8 + struct.unpack("<Q", data[:8])[0]])
put("safetensors", "truncated", files["one_f32"][:-5])
put("json", "escapes", b'{"k\\u00e9y": ["a\\n\\t\\"b", 12, {"x": []}]}')

ubyte3 = idx(0x08, [3, 4, 4], bytes(range(48)))
labels = idx(0x08, [3], bytes([0, 9, 4]))
seeds = {
    "ubyte3": ubyte3,
    "labels": labels,
    "int": idx(0x0C, [2], struct.pack(">2i", 1, -1)),
    "float": idx(0x0D, [2, 1], struct.pack(">2f", 1.5, 2.5)),
    "double": idx(0x0E, [1], struct.pack(">d", 3.25)),
    "short": idx(0x0B, [2], struct.pack(">2h", 1, -1)),
}
for name, data in seeds.items():
    for mode in (0, 1, 2):  # raw, gzipped, gzipped and cut at 3/4
        put("idx", f"{name}_mode{mode}", bytes([mode, 192]) + data)
for gz in (0, 1):
    pair = struct.pack(">H", len(ubyte3)) + bytes([gz]) + ubyte3 + labels
    put("fashion_mnist", f"pair_gzip{gz}", pair)
bad_label = struct.pack(">H", len(ubyte3)) + b"\x00" + ubyte3 + idx(0x08, [3], bytes([0, 10, 4]))
put("fashion_mnist", "label_out_of_range", bad_label)
