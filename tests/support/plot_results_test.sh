#!/usr/bin/env bash
# ctest plot_results: scripts/plot_results.py draws the committed training
# metrics, benchmark results and tables of RESULTS.md figures (docs/images/*.csv,
# *.json) into PNG files, and
# refuses malformed input with exit status 2 and a line naming the file.
# usage: plot_results_test.sh <source dir> <scratch dir>
set -euo pipefail
src=$1 work=$2
python=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1 is not a PNG"; }

"$python" "$src/scripts/plot_results.py" metrics "$work/curves.png" "mlp=$src/docs/images/fashion_mnist_mlp_training.csv" \
  "again=$src/docs/images/fashion_mnist_mlp_training.csv" --title test
is_png "$work/curves.png"
"$python" "$src/scripts/plot_results.py" benchmark "$work/bars.png" "$src/docs/images/host_fusion.json" \
  "other=$src/docs/images/host_fusion.json" --metric time
is_png "$work/bars.png"
"$python" "$src/scripts/plot_results.py" table "$work/step.png" "$src/docs/images/training_step_vs_pytorch.csv" --log
is_png "$work/step.png"
"$python" "$src/scripts/plot_results.py" table "$work/ranks.png" "$src/docs/images/scaling_with_ranks.csv" --lines
is_png "$work/ranks.png"

# Malformed input: exit status 2, the file named, nothing written.
expect_refusal() {  # expected-text args...
  local want=$1; shift
  local out status=0
  out=$("$python" "$src/scripts/plot_results.py" "$@" 2>&1) || status=$?
  [ "$status" -eq 2 ] || fail "exit status $status, not 2, for: $* ($out)"
  grep -qF "$want" <<<"$out" || fail "'$want' not in: $out"
}
printf 'epoch,train_loss,train_accuracy,test_loss,test_accuracy\n1,0.5,0.8,zero,0.8\n' > "$work/bad.csv"
expect_refusal "bad.csv:2: test_loss is 'zero', not a number" metrics "$work/x.png" "$work/bad.csv"
printf 'step,loss\n1,0.5\n' > "$work/other.csv"
expect_refusal "other.csv: no column epoch" metrics "$work/x.png" "$work/other.csv"
printf 'ranks,series,step_ms\n2,tp,fast\n' > "$work/table.csv"
expect_refusal "table.csv:2: step_ms is 'fast', not a number" table "$work/x.png" "$work/table.csv"
expect_refusal "needs numeric cases" table "$work/x.png" "$src/docs/images/training_step_vs_pytorch.csv" --lines
printf '{"context": {}}' > "$work/bad.json"
expect_refusal "bad.json: no 'benchmarks' list" benchmark "$work/x.png" "$work/bad.json"
expect_refusal "missing.json: cannot read it" benchmark "$work/x.png" "$work/missing.json"
[ ! -e "$work/x.png" ] || fail "a refused input still wrote a picture"
echo "plot_results: pictures drawn, malformed input refused"
