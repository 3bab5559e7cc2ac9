#!/usr/bin/env python3
"""Pictures of fusor's results, for README.md and bench/RESULTS.md (matplotlib;
Debian: apt-get install python3-matplotlib).

  plot_results.py metrics OUT.png [LABEL=]CSV... [--title TEXT]
      Training curves: the CSV files the examples write with --metrics FILE
      (epoch, train/test loss, train/test accuracy); loss on the left, test
      accuracy on the right, one line per file.

  plot_results.py benchmark OUT.png [LABEL=]JSON... [--metric bytes|items|time] [--title TEXT]
      Google Benchmark results (a benchmark binary run with
      --benchmark_out=FILE --benchmark_out_format=json): one horizontal bar per
      benchmark, its bytes/s (default, where reported), items/s or real time;
      the median of repetitions where there are several. Several files: their
      bars side by side, labelled.

  plot_results.py table OUT.png CSV [--lines] [--log] [--ylabel TEXT] [--title TEXT]
      Figures copied from bench/RESULTS.md into a CSV of three columns: the
      case (x axis), the series (one bar or line each) and the value, with the
      header naming them (e.g. case,series,samples_per_second). Grouped bars,
      or lines over a numeric case with --lines (e.g. ranks); --log for a
      logarithmic value axis. How each figure was measured stays in RESULTS.md.

Each input may be given as LABEL=PATH to name it in the legend. Exits 2 with a
one-line message for a missing or malformed input, naming the file and what is
wrong with it.
"""
import argparse
import csv
import json
import os
import statistics
import sys

METRICS_COLUMNS = ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy"]


class InputError(Exception):
    """A file that cannot be plotted; the message names it and why."""


def labelled(text):
    """'LABEL=PATH' or 'PATH' -> (label, path)."""
    label, sep, path = text.partition("=")
    if sep and label and not os.path.exists(text):
        return label, path
    return os.path.splitext(os.path.basename(text))[0], text


def read_metrics(path):
    """The columns of a --metrics CSV as lists of floats."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})")
    if not rows:
        raise InputError(f"{path}: no epochs (only a header, or empty)")
    missing = [c for c in METRICS_COLUMNS if c not in rows[0]]
    if missing:
        raise InputError(f"{path}: no column {', '.join(missing)} (is it an example's --metrics file?)")
    columns = {c: [] for c in METRICS_COLUMNS}
    for line, row in enumerate(rows, start=2):
        for c in METRICS_COLUMNS:
            try:
                columns[c].append(float(row[c]))
            except (TypeError, ValueError):
                raise InputError(f"{path}:{line}: {c} is '{row[c]}', not a number")
    return columns


def read_benchmark(path, metric):
    """{benchmark name: value} from a Google Benchmark JSON file, and the value's unit."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg}, line {e.lineno})")
    runs = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(runs, list) or not runs:
        raise InputError(f"{path}: no 'benchmarks' list (is it --benchmark_out_format=json output?)")
    key, unit, scale = {
        "bytes": ("bytes_per_second", "GB/s", 1e-9),
        "items": ("items_per_second", "M items/s", 1e-6),
        "time": ("real_time", None, 1.0),
    }[metric]
    values = {}
    for run in runs:
        if run.get("run_type") == "aggregate":
            continue  # the repetitions themselves are below; the median is taken here
        if key not in run:
            raise InputError(f"{path}: benchmark '{run.get('name')}' reports no {key} (try --metric time)")
        name = run.get("run_name", run.get("name"))
        for suffix in ("/real_time", "/process_time"):
            name = name[: -len(suffix)] if name.endswith(suffix) else name
        values.setdefault(name, []).append(float(run[key]) * scale)
        if unit is None:
            unit = run.get("time_unit", "ns")
    return {name: statistics.median(v) for name, v in values.items()}, unit


def plot_metrics(out, inputs, title, plt):
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4))
    for label, path in inputs:
        c = read_metrics(path)
        line = loss_axes.plot(c["epoch"], c["train_loss"], label=f"{label}: train")[0]
        loss_axes.plot(c["epoch"], c["test_loss"], linestyle="--", color=line.get_color(), label=f"{label}: test")
        accuracy_axes.plot(c["epoch"], [100 * a for a in c["test_accuracy"]], color=line.get_color(), label=label)
    loss_axes.set(xlabel="epoch", ylabel="cross-entropy loss", title="Loss")
    accuracy_axes.set(xlabel="epoch", ylabel="test accuracy (%)", title="Test accuracy")
    for axes in (loss_axes, accuracy_axes):
        axes.grid(alpha=0.3)
        axes.legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def plot_benchmark(out, inputs, metric, title, plt):
    tables = [(label, *read_benchmark(path, metric)) for label, path in inputs]
    names = []
    for _, values, _ in tables:
        names += [n for n in values if n not in names]
    unit = tables[0][2]
    height = 0.8 / len(tables)
    figure, axes = plt.subplots(figsize=(9, 0.45 * len(names) * len(tables) + 1.5))
    for i, (label, values, _) in enumerate(tables):
        rows = [j for j, n in enumerate(names) if n in values]
        axes.barh([j + i * height for j in rows], [values[names[j]] for j in rows], height=height, label=label)
    axes.set_yticks([j + height * (len(tables) - 1) / 2 for j in range(len(names))], names)
    axes.invert_yaxis()
    axes.set_xlabel({"bytes": f"bandwidth ({unit})", "items": unit, "time": f"real time ({unit})"}[metric])
    axes.grid(axis="x", alpha=0.3)
    if len(tables) > 1:
        axes.legend()
    if title:
        axes.set_title(title)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def read_table(path):
    """[(case, series, value)] and the value's column name, from a three-column CSV."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})")
    if len(rows) < 2:
        raise InputError(f"{path}: no rows (only a header, or empty)")
    if len(rows[0]) != 3:
        raise InputError(f"{path}: the header has {len(rows[0])} columns, not 3 (case, series, value)")
    table = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != 3:
            raise InputError(f"{path}:{line}: {len(row)} columns, not 3")
        try:
            table.append((row[0], row[1], float(row[2])))
        except ValueError:
            raise InputError(f"{path}:{line}: {rows[0][2]} is '{row[2]}', not a number")
    return table, rows[0][2]


def plot_table(out, path, lines, log, ylabel, title, plt):
    table, value_name = read_table(path)
    cases, series = [], []
    for case, name, _ in table:
        cases += [case] if case not in cases else []
        series += [name] if name not in series else []
    figure, axes = plt.subplots(figsize=(9, 4.5))
    if lines:
        try:
            xs = {c: float(c) for c in cases}
        except ValueError:
            raise InputError(f"{path}: --lines needs numeric cases (the first column), e.g. ranks")
        for name in series:
            points = sorted((xs[c], v) for c, n, v in table if n == name)
            axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        axes.set_xticks(sorted(xs.values()), [c for c in sorted(cases, key=lambda c: xs[c])])
    else:
        width = 0.8 / len(series)
        for i, name in enumerate(series):
            values = {c: v for c, n, v in table if n == name}
            at = [j for j, c in enumerate(cases) if c in values]
            bars = axes.bar([j + i * width for j in at], [values[cases[j]] for j in at], width=width, label=name)
            axes.bar_label(bars, fmt="%.3g", fontsize=7)
        axes.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(cases))], cases, fontsize=8)
    if log:
        axes.set_yscale("log")
    axes.set_ylabel(ylabel or value_name.replace("_", " "))
    axes.grid(axis="y", alpha=0.3)
    axes.legend(fontsize=8)
    if title:
        axes.set_title(title)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("kind", choices=["metrics", "benchmark", "table"])
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("inputs", nargs="+", help="[LABEL=]FILE")
    parser.add_argument("--metric", choices=["bytes", "items", "time"], default="bytes",
                        help="benchmark: what the bars show (default: bytes/s)")
    parser.add_argument("--title", default="", help="a title over the picture")
    parser.add_argument("--lines", action="store_true", help="table: lines over numeric cases instead of bars")
    parser.add_argument("--log", action="store_true", help="table: a logarithmic value axis")
    parser.add_argument("--ylabel", default="", help="table: the value axis' label (default: the CSV's)")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_results.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 2
    inputs = [labelled(text) for text in args.inputs]
    try:
        if args.kind == "metrics":
            plot_metrics(args.out, inputs, args.title, plt)
        elif args.kind == "table":
            if len(inputs) != 1:
                raise InputError(f"table takes one CSV, not {len(inputs)}")
            plot_table(args.out, inputs[0][1], args.lines, args.log, args.ylabel, args.title, plt)
        else:
            plot_benchmark(args.out, inputs, args.metric, args.title, plt)
    except InputError as e:
        print(f"plot_results.py: {e}", file=sys.stderr)
        return 2
    print(f"plot_results.py: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
