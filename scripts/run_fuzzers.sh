#!/usr/bin/env bash
# scripts/run_fuzzers.sh — builds the libFuzzer targets of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined), replays every kept input (the
# committed seed corpus and tests/fuzz/regressions/<target>/, the inputs of
# earlier findings), then fuzzes each target for FUSOR_FUZZ_SECONDS (30) from
# a copy of its corpus with its dictionary, as many targets at a time as the
# machine has cores (one each). Exits non-zero on any finding:
# a crash, a sanitizer report, a leak, or an exception other than the one the
# reader documents; the input is left in build-fuzz/findings/<target>/.
#
#   bash scripts/run_fuzzers.sh                      # every target, 30 s each (CI)
#   FUSOR_FUZZ_SECONDS=600 bash scripts/run_fuzzers.sh idx   # one target, longer
#
# A finding, once fixed, is kept: copy its input into tests/fuzz/regressions/<target>/.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FUSOR_PACKAGES=(clang libclang-rt-14-dev zlib1g-dev)
fusor_install_packages
fusor_find_cuda
cuda_include="$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/include"
[ -d "$cuda_include/cccl" ] || { fusor_say "the CUDA Toolkit's headers are needed (not found at $cuda_include)"; exit 1; }

seconds="${FUSOR_FUZZ_SECONDS:-30}"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { fusor_say "FUSOR_FUZZ_SECONDS is a whole number of seconds, 1 or more, not '$seconds'"; exit 2; }
fuzz="$FUSOR_ROOT/tests/fuzz"
build="${FUSOR_FUZZ_BUILD_DIR:-$FUSOR_ROOT/build-fuzz}"
if [ $# -gt 0 ]; then targets=("$@"); else targets=(json safetensors checkpoint_reader idx fashion_mnist); fi
mkdir -p "$build"

cxx="$(command -v clang++ || command -v clang++-14)"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# One target: build, replay its kept inputs, fuzz. Its messages go to
# $build/$t.status (printed when all have ended), and $build/$t.clean is
# written only if it ran clean: targets run FUSOR_JOBS at a time, each
# libFuzzer process on one core.
fuzz_target() {
  local t="$1" status="$build/$1.status"
  rm -f "$build/$t.clean"
  {
    "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
      -I "$FUSOR_ROOT/include" -isystem "$cuda_include" -isystem "$cuda_include/cccl" \
      "$fuzz/fuzz_$t.cpp" -o "$build/fuzz_$t" -lz >"$build/$t.build.log" 2>&1 || {
      cat "$build/$t.build.log"
      echo "$t: BUILD FAILED"
      return 1
    }
    local kept=("$fuzz/corpus/$t")
    [ -d "$fuzz/regressions/$t" ] && kept+=("$fuzz/regressions/$t")
    local findings="$build/findings/$t"
    rm -rf "$findings" "$build/corpus/$t"
    mkdir -p "$findings" "$build/corpus/$t"
    cp "$fuzz/corpus/$t"/* "$build/corpus/$t/"
    # -runs=0 over folders runs each input once: the kept findings must stay fixed.
    if ! "$build/fuzz_$t" -runs=0 -artifact_prefix="$findings/" "${kept[@]}" >"$build/$t.replay.log" 2>&1 ||
       ! "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -dict="$fuzz/dict/$t.dict" \
          -artifact_prefix="$findings/" -print_final_stats=1 "$build/corpus/$t" >"$build/$t.log" 2>&1; then
      tail -n 40 "$build/$t.replay.log" "$build/$t.log" 2>/dev/null || true
      echo "$t: FINDING (input in $findings/; once fixed, copy it into tests/fuzz/regressions/$t/)"
      return 1
    fi
    echo "$t: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$build/$t.log" | sed 's/.*: //') inputs," \
      "no finding"
    touch "$build/$t.clean"
  } >"$status" 2>&1
}

declare -A named
for t in "${targets[@]}"; do
  [ -f "$fuzz/fuzz_$t.cpp" ] || { fusor_say "no target tests/fuzz/fuzz_$t.cpp"; exit 2; }
  # libFuzzer takes a missing dictionary for an empty one: say so here instead.
  [ -f "$fuzz/dict/$t.dict" ] || { fusor_say "$t has no dictionary tests/fuzz/dict/$t.dict"; exit 2; }
  compgen -G "$fuzz/corpus/$t/*" >/dev/null || { fusor_say "$t has no seed inputs in tests/fuzz/corpus/$t/"; exit 2; }
  # Two runs of one target would share their files (and one's .clean hide the other's finding).
  [ -z "${named[$t]:-}" ] || { fusor_say "$t is named twice"; exit 2; }
  named[$t]=1
done
fusor_say "building and fuzzing ${targets[*]}, $FUSOR_JOBS at a time, $seconds s each after replaying the kept inputs"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$FUSOR_JOBS" ]; do wait -n || true; done
  fuzz_target "$t" &
done
wait || true
failed=()
for t in "${targets[@]}"; do
  while IFS= read -r line; do fusor_say "$line"; done <"$build/$t.status"
  [ -f "$build/$t.clean" ] || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  fusor_say "fuzz findings or failed builds in: ${failed[*]}"
  exit 1
fi
fusor_say "every fuzz target ran clean: ${targets[*]}"
