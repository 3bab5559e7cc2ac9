#!/usr/bin/env python3
"""Compares two runs of a fusor benchmark whose output is Markdown tables
(the CUDA benchmarks, gpu_check.sh reports): rows of the same table with the
same text cells are matched, and one numeric column is set side by side.

    python3 scripts/compare_bench.py BEFORE.md AFTER.md [--column ms]

The column is a header name (default: the first of ms, us, µs, GB/s,
TFLOP/s that the table has). For a time (ms, us, µs) the ratio is
before / after, for a rate after / before: above 1, AFTER is faster.
Tables and rows found in only one file are listed at the end, so that a
benchmark that stopped printing a row does not pass unnoticed. Both runs must
come from the same GPU in the same session for the ratio to mean anything
(bench/RESULTS.md, "GPU figures").
"""
import argparse
import re
import sys

TIME_COLUMNS = ("ms", "us", "µs")
RATE_COLUMNS = ("GB/s", "TFLOP/s")
NUMBER = re.compile(r"^[-+]?[0-9][0-9,]*(\.[0-9]+)?([eE][-+]?[0-9]+)?x?$")


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def is_number(text):
    return bool(NUMBER.match(text.replace("**", "")))


def number(text):
    return float(text.replace("**", "").replace(",", "").rstrip("x"))


def tables(path):
    """{header tuple: {key tuple: {column: text}}} of every Markdown table in the file."""
    found = {}
    header = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.lstrip().startswith("|"):
                header = None
                continue
            row = cells(line)
            if header is None:
                header = tuple(row)
                found.setdefault(header, {})
                continue
            if all(re.fullmatch(r":?-+:?", c) for c in row if c):
                continue  # the separator under the header
            if len(row) != len(header):
                continue
            key = tuple(c for c in row if not is_number(c) and c not in ("yes", "no"))
            found[header][key] = dict(zip(header, row))
    return found


def key_columns(rows):
    """The headers whose cells are text in every row: what names a row."""
    names = None
    for values in rows.values():
        text = {h for h, c in values.items() if not is_number(c) and c not in ("yes", "no")}
        names = text if names is None else names & text
    return names or set()


def chosen_column(header, wanted):
    if wanted:
        return wanted if wanted in header else None
    for name in TIME_COLUMNS + RATE_COLUMNS:
        if name in header:
            return name
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--column", help="the header of the numeric column to compare")
    args = parser.parse_args()
    try:
        before, after = tables(args.before), tables(args.after)
    except OSError as error:
        print(f"compare_bench: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return 2
    if not before or not after:
        print(f"compare_bench: no Markdown table in {args.before if not before else args.after}", file=sys.stderr)
        return 2
    unmatched = []
    for header, rows in before.items():
        column = chosen_column(header, args.column)
        if header not in after:
            unmatched.append(f"table only in {args.before}: | {' | '.join(header)} |")
            continue
        if column is None:
            continue
        later = after[header]
        names = [h for h in header if h in key_columns(rows)]
        print(f"\n| {' | '.join(names)} | {column} before | {column} after | ratio |")
        print("|" + "---|" * (len(names) + 3))
        for key, values in rows.items():
            if key not in later:
                unmatched.append(f"row only in {args.before}: {' / '.join(key)}")
                continue
            old, new = values[column], later[key][column]
            if not (is_number(old) and is_number(new)) or number(old) == 0 or number(new) == 0:
                continue
            ratio = number(old) / number(new) if column in TIME_COLUMNS else number(new) / number(old)
            text = [values[h] for h in names]
            failed = [h for h in header if later[key][h] == "no" and values[h] != "no"]
            note = f" ({', '.join(failed)}: no after)" if failed else ""
            print(f"| {' | '.join(text)} | {old} | {new} | {ratio:.2f}{note} |")
        unmatched += [f"row only in {args.after}: {' / '.join(k)}" for k in later if k not in rows]
    unmatched += [f"table only in {args.after}: | {' | '.join(h)} |" for h in after if h not in before]
    if unmatched:
        print("\nNot compared:")
        for line in unmatched:
            print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
