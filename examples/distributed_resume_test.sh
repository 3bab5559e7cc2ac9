#!/usr/bin/env bash
# ctest's check that the examples which train over several ranks save and
# resume distributed checkpoints (parallel/distributed_checkpoint.hpp):
#   - fashion_mnist_data_parallel on 2 ranks saves epoch 1; tensor_parallel_mlp
#     on 2 ranks (the same layers, split) resumes it, trains epoch 2 only, and
#     its save of epoch 2 replaces the first in the folder of saves;
#   - fashion_mnist_data_parallel with PowerSGD on 2 ranks saves (its error
#     feedback too); one rank with PowerSGD resumes it;
#   - pipeline_mlp as 2 stages saves epoch 1; one process (one stage) resumes it;
#   - pipeline_mlp refuses the MLP's save, naming a tensor whose shape differs.
# usage: distributed_resume_test.sh "<mpiexec ... -np 2>" data_parallel tensor_parallel pipeline
set -euo pipefail
read -r -a two_ranks <<<"$1"
data_parallel=$2 tensor_parallel=$3 pipeline=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
short=(--train-limit 1024 --test-limit 512 --quiet)
fail() { echo "FAILED: $*" >&2; exit 1; }

"${two_ranks[@]}" "$data_parallel" --epochs 1 "${short[@]}" --checkpoint "$dir/mlp" > "$dir/log" 2>&1 || { cat "$dir/log"; fail "data parallel save"; }
[[ $(cat "$dir/mlp/latest") == epoch-1 ]] || fail "latest does not name epoch-1"
"${two_ranks[@]}" "$tensor_parallel" --epochs 2 "${short[@]}" --checkpoint "$dir/mlp" --resume > "$dir/log" 2>&1 || { cat "$dir/log"; fail "tensor parallel resume"; }
cat "$dir/log"
grep -q "resumed from $dir/mlp/epoch-1 after epoch 1 (saved by a 2x1x1 " "$dir/log" || fail "no resume message"
grep -q "^epoch 2/2" "$dir/log" || fail "epoch 2 not trained"
! grep -q "^epoch 1/2" "$dir/log" || fail "epoch 1 trained again"
[[ $(cat "$dir/mlp/latest") == epoch-2 && ! -e "$dir/mlp/epoch-1" ]] || fail "epoch-2 did not replace epoch-1"

# PowerSGD's error feedback is part of the save: 2 ranks save, 1 resumes with it.
"${two_ranks[@]}" "$data_parallel" --epochs 1 "${short[@]}" --powersgd 4 --checkpoint "$dir/psgd" > "$dir/log" 2>&1 || { cat "$dir/log"; fail "PowerSGD save"; }
"$data_parallel" --epochs 2 "${short[@]}" --powersgd 4 --checkpoint "$dir/psgd" --resume > "$dir/log" 2>&1 || { cat "$dir/log"; fail "PowerSGD resume on one rank"; }
grep -q "after epoch 1 (saved by a 2x1x1 " "$dir/log" || { cat "$dir/log"; fail "no PowerSGD resume message"; }

"${two_ranks[@]}" "$pipeline" --epochs 1 "${short[@]}" --checkpoint "$dir/pipe" > "$dir/log" 2>&1 || { cat "$dir/log"; fail "pipeline save"; }
"$pipeline" --epochs 2 "${short[@]}" --checkpoint "$dir/pipe" --resume > "$dir/log" 2>&1 || { cat "$dir/log"; fail "pipeline resume"; }
cat "$dir/log"
grep -q "after epoch 1 (saved by a 1x1x2 " "$dir/log" || fail "no pipeline resume message"

if "$pipeline" --epochs 3 "${short[@]}" --checkpoint "$dir/mlp" --resume > "$dir/log" 2>&1; then fail "a save of other layers was accepted"; fi
grep -q "tensor '[0-9]*\.weight' has shape \[" "$dir/log" || { cat "$dir/log"; fail "the refusal does not name the tensor"; }
echo "distributed checkpoints: saved and resumed across examples, meshes and stage counts"
