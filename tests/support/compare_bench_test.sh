#!/usr/bin/env bash
# ctest compare_bench: scripts/compare_bench.py matches the rows of two
# benchmark outputs by their text cells and gives before / after for times,
# after / before for rates; rows, tables and failed checks found on one side
# only are named; an unreadable or table-less file is refused (exit status 2).
# usage: compare_bench_test.sh <source dir> <scratch dir>
set -euo pipefail
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
compare() { python3 "$src/scripts/compare_bench.py" "$@"; }

cat > "$work/before.md" <<'MD'
| kernel | prec | rows x n | ms | GB/s | checked |
|---|---|---|---:|---:|---|
| softmax   | fp32 | 16384 x 4096 | 0.200 | 2000 | yes |
| layernorm | bf16 | 16384 x 4096 | 0.100 | 2800 | yes |
| gone      | fp32 | 1 x 1        | 0.001 | 1    | yes |

| shape | TFLOP/s |
|---|---:|
| 256^3 | 10.0 |
MD
cat > "$work/after.md" <<'MD'
| kernel | prec | rows x n | ms | GB/s | checked |
|---|---|---|---:|---:|---|
| softmax   | fp32 | 16384 x 4096 | 0.100 | 4000 | yes |
| layernorm | bf16 | 16384 x 4096 | 0.125 | 2240 | no |
| new       | fp32 | 2 x 2        | 0.002 | 2    | yes |

| shape | TFLOP/s |
|---|---:|
| 256^3 | 12.5 |
MD
out=$(compare "$work/before.md" "$work/after.md")
want() { grep -qF -- "$1" <<<"$out" || fail "'$1' not in:"$'\n'"$out"; }
want "| softmax | fp32 | 16384 x 4096 | 0.200 | 0.100 | 2.00 |"
want "| layernorm | bf16 | 16384 x 4096 | 0.100 | 0.125 | 0.80 (checked: no after) |"
want "| 256^3 | 10.0 | 12.5 | 1.25 |"
want "row only in $work/before.md: gone / fp32 / 1 x 1"
want "row only in $work/after.md: new / fp32 / 2 x 2"
out=$(compare "$work/before.md" "$work/after.md" --column GB/s)
want "| softmax | fp32 | 16384 x 4096 | 2000 | 4000 | 2.00 |"

status=0
out=$(compare "$work/before.md" "$work/missing.md" 2>&1) || status=$?
[ "$status" -eq 2 ] || fail "exit status $status, not 2, for a missing file"
want "cannot read $work/missing.md"
echo "no table here" > "$work/empty.md"
status=0
out=$(compare "$work/before.md" "$work/empty.md" 2>&1) || status=$?
[ "$status" -eq 2 ] || fail "exit status $status, not 2, for a file without tables"
want "no Markdown table in $work/empty.md"
echo "compare_bench: all checks passed"
