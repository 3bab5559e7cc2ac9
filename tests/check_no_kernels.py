#!/usr/bin/env python3
"""tests/check_no_kernels.py OBJECT... -- fails when an object file compiled by
nvcc holds a kernel of its own: nvcc makes a host stub, __device_stub__<kernel>,
for each kernel a translation unit launches. A program linking
fusor::cuda_runtime must not compile again what the library precompiled: a
declaration that stopped matching its instance compiles silently, only slower."""
import re
import subprocess
import sys

STUB = "__device_stub__"


def kernels_of(path):
    symbols = subprocess.run(["nm", path], check=True, capture_output=True, text=True).stdout
    kernels = set()
    # The stub's name appears length-prefixed inside the mangled names of the
    # stub and of its local statics: <length>__device_stub__<kernel without its leading '_'>.
    for length, start in ((int(m.group(1)), m.end(1)) for m in re.finditer(r"(\d+)" + STUB, symbols)):
        kernels.add("_" + symbols[start + len(STUB):start + length])
    for m in re.finditer(r"(?<![0-9A-Za-z_])" + STUB + r"(_Z|Z)([0-9A-Za-z_]+)", symbols):  # unmangled stubs
        kernels.add("_Z" + m.group(2))
    return sorted(kernels)


def main(objects):
    status = 0
    for path in objects:
        kernels = kernels_of(path)
        if not kernels:
            print(f"ok: {path} compiles no kernel of its own")
            continue
        status = 1
        names = subprocess.run(["c++filt"], input="\n".join(kernels), capture_output=True, text=True).stdout.split("\n")
        print(f"FAIL: {path} compiles {len(kernels)} kernel(s) of its own, which fusor::cuda_runtime should hold:")
        for name in names[:40]:
            if name:
                print("  " + name[:300])
    return status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
