#!/usr/bin/env bash
# tests/gpu_check/kit_smoke_test.sh — keeps scripts/gpu_check.sh from rotting
# on machines without a GPU (CI): builds a small kit (quickstart_cuda only,
# and the same program built from this commit as a baseline), checks what it
# holds, runs its bench phase (the baseline), its examples phase
# (quickstart_cuda falls back to the host without a GPU) and its tests phase
# (no test binary in this kit), and checks the reports. Usage:
# kit_smoke_test.sh WORK_DIR
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$1"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "kit smoke test: $*" >&2; exit 1; }

# A baseline too (FUSOR_GPU_BASELINES): quickstart_cuda of this very commit,
# built in a worktree, where a checkout has one.
baseline=""
if commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null); then baseline="$commit:quickstart_cuda"; fi
FUSOR_GPU_ONLY='^quickstart_cuda$' FUSOR_GPU_ARCHS=90 FUSOR_GPU_BUILD_DIR="$work/build" FUSOR_GPU_BASELINES="$baseline" \
  bash "$root/scripts/gpu_check.sh" build "$work/kit"
for f in gpu_check.sh payload.tar.xz MANIFEST.txt provided.txt data/fashion-mnist/train-images-idx3-ubyte.gz; do
  [ -f "$work/kit/$f" ] || fail "the kit lacks $f"
done
payload=$(xz -dc "$work/kit/payload.tar.xz" | tar -tf -)
grep -q 'bin/examples/quickstart_cuda$' <<<"$payload" || fail "quickstart_cuda is not in the payload"
grep -q 'bin/probes/initcheck_probe$' <<<"$payload" || fail "initcheck's probe is not in the payload"
grep -q '^commit: ' "$work/kit/MANIFEST.txt" || fail "MANIFEST.txt names no commit"
if [ -n "$baseline" ]; then
  grep -q "bin/baseline/quickstart_cuda@$commit\$" <<<"$payload" || fail "the baseline quickstart_cuda@$commit is not in the payload"
  FUSOR_GPU_UNPACK_DIR="$work/unpacked" bash "$work/kit/gpu_check.sh" run --phases bench --report "$work/report/b.md" ||
    fail "run's bench phase reported failures: $(cat "$work/report/b.md")"
  grep -q "### quickstart_cuda at $commit (baseline)" "$work/report/b.md" || fail "the bench phase did not run the baseline"
  git -C "$root" worktree remove --force "$work/build/baseline-$commit"
fi

FUSOR_GPU_UNPACK_DIR="$work/unpacked" bash "$work/kit/gpu_check.sh" run --phases examples,tests --report "$work/report/r.md" ||
  fail "run reported failures: $(cat "$work/report/r.md")"
grep -q '| quickstart_cuda | passed |' "$work/report/r.md" || fail "the report has no passing quickstart_cuda row"
grep -q 'everything passed' "$work/report/r.md" || fail "the report's verdict is missing"
[ -x "$work/unpacked/bin/examples/quickstart_cuda" ] || fail "run did not unpack the payload where FUSOR_GPU_UNPACK_DIR says"
[ ! -e "$work/kit/unpacked" ] || fail "run unpacked into the kit, which must stay small enough to carry"
# An unknown option is refused with the usage's exit status.
set +e
for bad in "--no-such-option" "--timeout abc" "--timeout" "--epochs 0" "--phases tests,fuzz" "--tools memcheck,asan" \
           "--report --phases"; do
  # shellcheck disable=SC2086  # the case's words
  bash "$work/kit/gpu_check.sh" run $bad >/dev/null 2>&1
  [ $? -eq 2 ] || fail "run $bad did not exit with 2"
done
set -e
echo "kit smoke test: passed"
