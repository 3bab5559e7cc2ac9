#!/usr/bin/env python3
"""examples/options_in_readme_test.py README BIN_DIR PROGRAM... — README's options
tables say what the programs accept: every row each PROGRAM prints with
--help-markdown (generated from the same table its parser uses) must appear in
README verbatim. Prints the missing rows and exits 1 when any is missing."""
import os
import subprocess
import sys


def main():
    readme, bin_dir, programs = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(readme) as f:
        text = f.read()
    missing = 0
    for name in programs:
        rows = subprocess.run([os.path.join(bin_dir, name), "--help-markdown"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
        for row in rows[2:]:  # the two header lines are README's too, once per table
            if row not in text:
                missing += 1
                print(f"{name}: README.md lacks the row\n    {row}")
    print(f"options_in_readme_test: {'all rows present' if not missing else f'{missing} rows missing'} "
          f"({len(programs)} programs)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
