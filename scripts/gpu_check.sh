#!/usr/bin/env bash
# scripts/gpu_check.sh — proves fusor's CUDA half on a GPU, in two halves,
# because the machine that builds has no GPU and the GPU machine has no compiler:
#
#   bash scripts/gpu_check.sh build [KIT]     here: nvcc builds every CUDA test,
#       CUDA benchmark and CUDA example (sm_80 and sm_90) into the folder KIT
#       (default build-gpu/kit, at most 64 MiB): gpu_check.sh itself, the
#       binaries and the shared libraries a bare GPU machine lacks (OpenBLAS,
#       zlib, OpenMP; xz-compressed in payload.tar.xz, with an $ORIGIN rpath),
#       Fashion-MNIST and the PyTorch comparison script.
#   bash KIT/gpu_check.sh run [options]       there, from the copied folder: no
#       compiler, no network. Prints nvidia-smi, runs every CUDA test, each test
#       binary under compute-sanitizer (memcheck, racecheck, synccheck,
#       initcheck; before initcheck, a probe of whether initcheck sees cuBLAS's
#       writes here: on an H200 with CUDA 13.0 it does not, so reads of a GEMM's
#       output are reported falsely), the CUDA benchmarks and the CUDA examples (the Fashion-MNIST
#       MLP and CNN must reach the host's test accuracy), and writes one
#       Markdown report with every figure and every failure. Exit status 1 when
#       anything failed.
#
# run's options (each phase can run alone, to fit a time-limited lease):
#   --report FILE      the report (default KIT/report/gpu_check.md; the full
#                      output of every command goes to FILE's .log beside it)
#   --phases LIST      comma-separated, of: tests,sanitizer,bench,examples (default all)
#   --tools LIST       compute-sanitizer tools (default memcheck,racecheck,synccheck,initcheck)
#   --only REGEX       only the binaries whose name matches (e.g. 'core|nn')
#   --timeout S        seconds per command (default 900)
#   --epochs N         epochs of the Fashion-MNIST examples (default 10: the
#                      host's accuracies below are for 10 epochs)
# The payload is unpacked into FUSOR_GPU_UNPACK_DIR (default a folder in $TMPDIR),
# never into the kit.
#
# Environment for build: FUSOR_GPU_ARCHS (default "80-real;90": sm_80 and sm_90
# machine code, and compute_90 PTX for newer GPUs; "90" builds in half the time), FUSOR_GPU_BUILD_DIR
# (default build-gpu), FUSOR_GPU_ONLY (a regex: only the targets it matches, for
# a quick kit), FUSOR_GPU_KEEP_SYMBOLS=1 (host symbols kept, so that
# compute-sanitizer's backtraces name the calling functions; with
# FUSOR_GPU_ONLY, to stay under 64 MiB) or =REGEX (kept in the targets it
# matches only), FUSOR_GPU_ASSEMBLE_ONLY=1 (pack what is built, build nothing:
# to re-pack with other symbols without rebuilding), FUSOR_JOBS,
# FUSOR_GPU_BASELINES (benchmarks of earlier commits to measure a change
# against on the same card: "COMMIT:TARGET[,TARGET...] ...", e.g.
# "ff2fc32:bench_rowwise_cuda ebee59e:bench_matmul_cuda,bench_reduce_cuda";
# each commit is built in a git worktree under the build folder and its
# benchmarks travel in the kit as bin/baseline/TARGET@COMMIT; run's bench phase
# runs each after the kit's own and sets the two side by side with
# scripts/compare_bench.py).
set -euo pipefail

# Test accuracy after 10 epochs on the host (bench/RESULTS.md, fp32): the GPU
# run (bf16) must reach it, less half a point.
readonly HOST_ACCURACY_MLP=0.8994
readonly HOST_ACCURACY_CNN=0.9243
readonly ACCURACY_SLACK=0.005
readonly KIT_LIMIT_BYTES=$((64 * 1024 * 1024))
# Libraries the GPU machine's driver and CUDA Toolkit provide (and that are too
# large to carry: cuBLASLt alone is over 500 MB); run finds them there.
readonly PROVIDED_LIBRARIES='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'

say() { printf '[gpu_check] %s\n' "$*"; }
die() { printf '[gpu_check] error: %s\n' "$*" >&2; exit 2; }

# ---------------------------------------------------------------- build half
kit_build() {
  local kit="${1:-}"
  # shellcheck source=scripts/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
  kit="${kit:-$FUSOR_ROOT/build-gpu/kit}"
  local build="${FUSOR_GPU_BUILD_DIR:-$FUSOR_ROOT/build-gpu}"
  fusor_install_packages
  fusor_find_cuda
  command -v nvcc >/dev/null || die "nvcc not found: the build half needs the CUDA Toolkit (put its bin/ on PATH)"
  command -v xz >/dev/null || die "xz not found (Debian: apt-get install xz-utils)"

  say "configuring $build for CUDA architectures ${FUSOR_GPU_ARCHS:-80-real;90}"
  # Host code for any x86-64 (the GPU machine's processor is not this one);
  # binaries find the libraries carried beside them through $ORIGIN; device
  # code fully optimised (FUSOR_CUDA_COMPILE_CHECK off: these run). Ninja for
  # a new tree (common.sh): the targets below build side by side.
  local generator
  fusor_generator_args "$build" generator
  cmake "${generator[@]}" -S "$FUSOR_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${FUSOR_GPU_ARCHS:-80-real;90}" -DFUSOR_ENABLE_CUDA=ON -DFUSOR_CUDA_COMPILE_CHECK=OFF \
    -DFUSOR_BENCH_HOST_FLAGS=-O3 '-DCMAKE_BUILD_RPATH=$ORIGIN/../../lib' >/dev/null

  local targets
  targets=$(fusor_build_targets "$build" |
            grep -E '(_cuda_tests|_nccl_tests|_cuda)$|^bench_cuda_' | grep -Ev '^fusor_header_check' |
            grep -E "${FUSOR_GPU_ONLY:-.}" | sort -u)  # the header check is objects, not a program
  [ -n "$targets" ] || die "no CUDA targets in $build (is FUSOR_ENABLE_CUDA on?)"
  if [ -n "${FUSOR_GPU_ASSEMBLE_ONLY:-}" ]; then
    say "packing the $(echo "$targets" | wc -l) CUDA targets as built (FUSOR_GPU_ASSEMBLE_ONLY: no build)"
  else
    say "building $(echo "$targets" | wc -l) CUDA targets with $FUSOR_JOBS jobs"
    # shellcheck disable=SC2086  # one word per target
    cmake --build "$build" --parallel "$FUSOR_JOBS" --target $targets
  fi

  say "assembling $kit"
  rm -rf "$kit" && mkdir -p "$kit/stage/bin/tests" "$kit/stage/bin/bench" "$kit/stage/bin/examples" "$kit/stage/lib" \
    "$kit/stage/bench" "$kit/data/fashion-mnist"
  local target binary folder left_out=()
  for target in $targets; do
    binary=$(find "$build" -type f -name "$target" -perm -u+x | head -1)
    [ -n "$binary" ] || die "built target $target has no binary under $build"
    # Programs of several processes need mpirun, which the GPU machine lacks.
    if ldd "$binary" | grep -q 'libmpi'; then left_out+=("$target (needs MPI and mpirun)"); continue; fi
    case "$target" in
      *_tests) folder=tests ;;
      bench_*) folder=bench ;;
      *) folder=examples ;;
    esac
    if [ "${FUSOR_GPU_KEEP_SYMBOLS:-}" = 1 ] ||
       { [ -n "${FUSOR_GPU_KEEP_SYMBOLS:-}" ] && echo "$target" | grep -Eq -- "$FUSOR_GPU_KEEP_SYMBOLS"; }; then
      cp "$binary" "$kit/stage/bin/$folder/$target"  # sanitizer backtraces name host functions
    else
      strip --strip-unneeded "$binary" -o "$kit/stage/bin/$folder/$target"  # host symbols only; device code stays
    fi
  done
  build_baselines "$kit" "$build"
  # initcheck's probe (tests/gpu_check/initcheck_probe.cu): host code calling cuBLAS, no kernel of its own.
  mkdir -p "$kit/stage/bin/probes"
  nvcc -O2 "$FUSOR_ROOT/tests/gpu_check/initcheck_probe.cu" -o "$kit/stage/bin/probes/initcheck_probe" -lcublas
  copy_libraries "$kit/stage"
  mkdir -p "$kit/stage/tests" && cp "$FUSOR_ROOT/tests/train/gpt_pytorch_reference.py" "$kit/stage/tests/"
  cp "$FUSOR_ROOT/bench/train_mlp_gpu.py" "$FUSOR_ROOT/bench/rowwise_torch_gpu.py" \
    "$FUSOR_ROOT/bench/attention_torch_gpu.py" "$FUSOR_ROOT/bench/cuda_event_timing.py" \
    "$FUSOR_ROOT/scripts/compare_bench.py" "$kit/stage/bench/"
  cp /usr/share/datasets/fashion-mnist/*.gz "$kit/data/fashion-mnist/"
  # gpt_char's corpus travels in the payload (xz makes its 5 MB about 1.5).
  fusor_fetch_shakespeare
  mkdir -p "$kit/stage/data" && cp "$FUSOR_DATA_DIR/shakespeare.txt" "$kit/stage/data/"
  cp "${BASH_SOURCE[0]}" "$kit/gpu_check.sh"
  {
    echo "fusor GPU kit"
    echo "commit: $(git -C "$FUSOR_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$FUSOR_ROOT" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
    echo "nvcc: $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), architectures ${FUSOR_GPU_ARCHS:-80-real;90}"
    echo "needs on the GPU machine: $(tr '\n' ' ' <"$kit/stage/provided.txt")"
    for item in "${left_out[@]}"; do echo "not in the kit: $item"; done
  } >"$kit/MANIFEST.txt"
  mv "$kit/stage/provided.txt" "$kit/provided.txt"
  say "compressing the binaries and libraries"
  tar -C "$kit/stage" -cf - . | xz -T"$FUSOR_JOBS" -6 >"$kit/payload.tar.xz"
  rm -rf "$kit/stage"
  local bytes
  bytes=$(du -sb "$kit" | cut -f1)
  if [ "$bytes" -gt "$KIT_LIMIT_BYTES" ]; then
    die "$kit is $((bytes / 1048576)) MiB, over the 64 MiB a GPU session can carry"
  fi
  say "kit ready: $kit ($((bytes / 1048576)) MiB). On the GPU machine: bash $kit/gpu_check.sh run"
}

# FUSOR_GPU_BASELINES' benchmarks, each built at its commit (a worktree under
# the build folder, configured as the kit is) into the kit's bin/baseline/ as
# TARGET@COMMIT.
build_baselines() {
  local kit="$1" build="$2" spec commit targets source target binary generator
  for spec in ${FUSOR_GPU_BASELINES:-}; do
    commit=${spec%%:*}
    targets=${spec#*:}
    if [ "$commit" = "$spec" ] || [ -z "$targets" ]; then
      die "FUSOR_GPU_BASELINES: '$spec' is not COMMIT:TARGET[,TARGET...]"
    fi
    git -C "$FUSOR_ROOT" rev-parse --verify --quiet "$commit^{commit}" >/dev/null ||
      die "FUSOR_GPU_BASELINES: no commit '$commit' in $FUSOR_ROOT"
    source="$build/baseline-$commit"
    [ -e "$source/.git" ] || git -C "$FUSOR_ROOT" worktree add --force --detach "$source" "$commit" >/dev/null
    say "building the baseline ${targets//,/ } at $commit"
    fusor_generator_args "$source/build" generator
    cmake "${generator[@]}" -S "$source" -B "$source/build" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="${FUSOR_GPU_ARCHS:-80-real;90}" -DFUSOR_ENABLE_CUDA=ON \
      -DFUSOR_BENCH_HOST_FLAGS=-O3 '-DCMAKE_BUILD_RPATH=$ORIGIN/../../lib' >/dev/null
    # shellcheck disable=SC2086  # one word per target
    cmake --build "$source/build" --parallel "$FUSOR_JOBS" --target ${targets//,/ }
    mkdir -p "$kit/stage/bin/baseline"
    for target in ${targets//,/ }; do
      binary=$(find "$source/build" -type f -name "$target" -perm -u+x | head -1)
      [ -n "$binary" ] || die "baseline $target at $commit built no binary under $source/build"
      strip --strip-unneeded "$binary" -o "$kit/stage/bin/baseline/$target@$commit"
    done
  done
}

# Every shared library the kit's binaries load, except those the GPU machine's
# driver and toolkit provide (listed in provided.txt for run to look for).
copy_libraries() {
  local stage="$1" line name path
  : >"$stage/provided.txt.tmp"
  while read -r line; do
    name=${line%% *}
    path=$(echo "$line" | sed -n 's/.*=> \(\/[^ ]*\).*/\1/p')
    [ -n "$path" ] || continue
    if echo "$name" | grep -Eq "$PROVIDED_LIBRARIES"; then
      echo "$name" | grep -Eq '^(libcublas|libcublasLt|libnccl)\.' && echo "$name" >>"$stage/provided.txt.tmp"
      continue
    fi
    cp -L "$path" "$stage/lib/$name"
  done < <(find "$stage/bin" -type f -exec ldd {} \; | grep '=>' | sed 's/^[[:space:]]*//' | sort -u)
  sort -u "$stage/provided.txt.tmp" >"$stage/provided.txt" && rm "$stage/provided.txt.tmp"
}

# ------------------------------------------------------------------ run half
kit_run() {
  local kit report phases="tests,sanitizer,bench,examples" tools="memcheck,racecheck,synccheck,initcheck"
  local only="" timeout_s=900 epochs=10
  kit="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  [ -f "$kit/payload.tar.xz" ] || die "$kit has no payload.tar.xz: run this from a kit made by 'gpu_check.sh build'"
  report="$kit/report/gpu_check.md"
  while [ $# -gt 0 ]; do
    case "$1" in
      --report|--phases|--tools|--only|--timeout|--epochs)
        [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#--}" = "$2" ] || die "$1 needs a value (see the top of gpu_check.sh)" ;;
    esac
    case "$1" in
      --report) report="$2"; shift 2 ;;
      --phases) phases="$2"; shift 2 ;;
      --tools) tools="$2"; shift 2 ;;
      --only) only="$2"; shift 2 ;;
      --timeout) timeout_s="$2"; shift 2 ;;
      --epochs) epochs="$2"; shift 2 ;;
      *) die "unknown option $1 (see the top of gpu_check.sh)" ;;
    esac
  done
  [[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "--timeout is a whole number of seconds, 1 or more, not '$timeout_s'"
  [[ "$epochs" =~ ^[1-9][0-9]*$ ]] || die "--epochs is a whole number, 1 or more, not '$epochs'"
  local item
  for item in ${phases//,/ }; do
    case "$item" in tests|sanitizer|bench|examples) ;; *) die "--phases: '$item' is not one of tests, sanitizer, bench, examples" ;; esac
  done
  for item in ${tools//,/ }; do
    case "$item" in memcheck|racecheck|synccheck|initcheck) ;; *) die "--tools: '$item' is not one of memcheck, racecheck, synccheck, initcheck" ;; esac
  done
  mkdir -p "$(dirname "$report")"
  REPORT="$report"
  LOG="${report%.md}.log"
  TIMEOUT_S="$timeout_s"
  FAILURES=0
  : >"$LOG"

  unpack "$kit"
  find_provided_libraries "$kit"
  export LD_LIBRARY_PATH="$UNPACKED/lib${PROVIDED_PATH:+:$PROVIDED_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

  write_header "$kit"
  prepare_test_machine "$kit"
  bins() { find "$UNPACKED/bin/$1" -type f 2>/dev/null | sort | { if [ -n "$only" ]; then grep -E "$only" || true; else cat; fi; }; }
  case ",$phases," in *,tests,*) phase_tests "$(bins tests)" ;; esac
  case ",$phases," in *,sanitizer,*) phase_sanitizer "$(bins tests)" "$tools" ;; esac
  case ",$phases," in *,bench,*) phase_bench "$(bins bench)" "$kit" ;; esac
  case ",$phases," in *,examples,*) phase_examples "$(bins examples)" "$kit" "$epochs" ;; esac

  {
    echo
    if [ "$FAILURES" -eq 0 ]; then echo "**Result: everything passed.**"; else echo "**Result: $FAILURES failure(s)**: see the sections above and $(basename "$LOG")."; fi
  } >>"$REPORT"
  say "report: $REPORT ($FAILURES failure(s)); full output: $LOG"
  [ "$FAILURES" -eq 0 ]
}

# The payload is unpacked outside the kit (FUSOR_GPU_UNPACK_DIR, default a
# folder in $TMPDIR named by the payload's checksum), so the kit stays small
# enough to carry again, and a second run reuses it.
unpack() {
  local kit="$1" sum
  sum=$(cksum <"$kit/payload.tar.xz" | cut -d' ' -f1)
  UNPACKED="${FUSOR_GPU_UNPACK_DIR:-${TMPDIR:-/tmp}/fusor-gpu-kit-$sum}"
  if [ -f "$UNPACKED/.done" ]; then return; fi
  rm -rf "$UNPACKED" && mkdir -p "$UNPACKED"
  if command -v xz >/dev/null; then
    xz -dc "$kit/payload.tar.xz" | tar -C "$UNPACKED" -xf -
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$kit/payload.tar.xz" "$UNPACKED"
  fi
  touch "$UNPACKED/.done"
}

# cuBLASLt and NCCL from the machine's CUDA Toolkit, or from the pip packages
# that PyTorch brings (nvidia-cublas, nvidia-nccl-cu13).
find_provided_libraries() {
  local kit="$1" name dir found roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
  local site
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)
  [ -n "$site" ] && roots+=("$site/nvidia")
  PROVIDED_PATH=""
  MISSING_LIBRARIES=""
  while read -r name; do
    [ -n "$name" ] || continue
    found=$(find -H "${roots[@]}" -maxdepth 4 -name "$name" 2>/dev/null | head -1 || true)  # -H: a root may be a link (lib -> ../../lib)
    if [ -z "$found" ]; then MISSING_LIBRARIES+="$name "; continue; fi
    dir=$(dirname "$found")
    case ":$PROVIDED_PATH:" in *":$dir:"*) ;; *) PROVIDED_PATH="${PROVIDED_PATH:+$PROVIDED_PATH:}$dir" ;; esac
  done <"$kit/provided.txt"
}

write_header() {
  local kit="$1"
  {
    echo "# fusor GPU check"
    echo
    echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) by \`gpu_check.sh run\`."
    echo
    echo '```'
    sed 's/^/kit: /' "$kit/MANIFEST.txt"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || true
      nvidia-smi | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/\1/p' || true
    else
      echo "nvidia-smi: not found"
    fi
    echo "libraries from this machine: ${PROVIDED_PATH:-none found}"
    [ -n "$MISSING_LIBRARIES" ] && echo "NOT FOUND on this machine: $MISSING_LIBRARIES"
    echo '```'
  } >>"$REPORT"
  if command -v nvidia-smi >/dev/null; then nvidia-smi 2>&1 | tee -a "$LOG"; fi
  if [ -n "$MISSING_LIBRARIES" ]; then
    echo "**Missing libraries: $MISSING_LIBRARIES** (binaries that need them fail to start)." >>"$REPORT"
    FAILURES=$((FAILURES + 1))
  fi
}

# run_logged NAME COMMAND...: runs with the time limit, its output into the log;
# sets RC, SECONDS_TAKEN and OUTPUT_FILE.
run_logged() {
  local name="$1"; shift
  OUTPUT_FILE=$(mktemp)
  local start=$SECONDS
  set +e
  timeout --kill-after=30 "$TIMEOUT_S" "$@" >"$OUTPUT_FILE" 2>&1
  RC=$?
  set -e
  SECONDS_TAKEN=$((SECONDS - start))
  { echo "===== $name (exit $RC, ${SECONDS_TAKEN} s): $*"; cat "$OUTPUT_FILE"; echo; } >>"$LOG"
}

# A table row, and the output's tail under "Failures" when it failed.
record() {
  local phase="$1" name="$2" verdict="$3" note="${4:-}"
  # Rows go straight into the report, so a run cut short keeps what it did.
  [ "$phase" = bench ] || echo "| $name | $verdict | $SECONDS_TAKEN | $note |" >>"$REPORT"
  if [ "$verdict" != "passed" ]; then
    FAILURES=$((FAILURES + 1))
    { echo "#### $phase: $name ($verdict)"; echo '```'; tail -n 40 "$OUTPUT_FILE"; echo '```'; } >>"$REPORT.failures"
  fi
}

verdict_of() {
  case "$RC" in
    0) echo passed ;;
    77) echo "FAILED: skipped (no GPU seen)" ;;
    124|137) echo "FAILED: timed out after ${TIMEOUT_S} s" ;;
    *) echo "FAILED: exit $RC" ;;
  esac
}

begin_section() {
  { echo; echo "## $1"; echo; [ -n "${2:-}" ] && { echo "$2"; echo; }; echo "| what | result | seconds | note |"; echo "|---|---|---|---|"; } >>"$REPORT"
  : >"$REPORT.failures"
}
end_section() {
  if [ -s "$REPORT.failures" ]; then { echo; echo "### Failures"; echo; cat "$REPORT.failures"; } >>"$REPORT"; fi
  rm -f "$REPORT.failures"
}

# What the tests expect of the machine they run on, made so from the kit: the
# Fashion-MNIST files where Debian's dataset-fashion-mnist puts them, and the
# GPT test's PyTorch side run by the python3 that holds PyTorch, from the kit.
prepare_test_machine() {
  local kit="$1" debian=/usr/share/datasets/fashion-mnist
  if [ ! -d "$debian" ]; then
    if mkdir -p "$debian" 2>/dev/null && cp "$kit/data/fashion-mnist/"*.gz "$debian/"; then
      echo "Fashion-MNIST: copied from the kit to $debian (where the tests read it)." >>"$REPORT"
    else
      echo "Fashion-MNIST: $debian is missing and cannot be made here: the tests that read it fail." >>"$REPORT"
    fi
  fi
  FUSOR_TEST_PYTHON=$(command -v python3 || echo python3)
  export FUSOR_TEST_PYTHON FUSOR_TEST_GPT_SCRIPT="$UNPACKED/tests/gpt_pytorch_reference.py"
}

phase_tests() {
  local bin summary
  begin_section "CUDA tests" "Every CUDA test binary (doctest), as ctest runs it."
  for bin in $1; do
    say "test $(basename "$bin")"
    run_logged "test $(basename "$bin")" "$bin"
    summary=$(grep -E '^\[doctest\] test cases' "$OUTPUT_FILE" | tail -1 | sed 's/\[doctest\] //; s/|/\//g' || true)
    record tests "$(basename "$bin")" "$(verdict_of)" "$summary"
    rm -f "$OUTPUT_FILE"
    # The matmul and layer tests again with cuBLASLt's bias-gradient epilogues
    # replaced by fusor's own sum: the fallback for shapes with no algorithm.
    case "$(basename "$bin")" in
      fusor_matmul_cuda_tests|fusor_nn_cuda_tests)
        run_logged "test $(basename "$bin") (bias gradient summed apart)" \
          env FUSOR_MATMUL_NO_BIAS_GRAD_EPILOGUE=1 "$bin"
        summary=$(grep -E '^\[doctest\] test cases' "$OUTPUT_FILE" | tail -1 | sed 's/\[doctest\] //; s/|/\//g' || true)
        record tests "$(basename "$bin") with FUSOR_MATMUL_NO_BIAS_GRAD_EPILOGUE=1" "$(verdict_of)" "$summary"
        rm -f "$OUTPUT_FILE" ;;
    esac
  done
  end_section
}

phase_sanitizer() {
  local bins="$1" tools="$2" tool bin sanitizer errors
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
              /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1 || true)
  begin_section "compute-sanitizer" "Each test binary under each tool (\`--error-exitcode 86\`); tests of tensors over 2^31 elements (doctest suite \"large\") are left out: they are slow under a sanitizer and checked in the tests above. CUDA API calls that return an error are not counted (\`--report-api-errors no\`): the error tests make them on purpose, NCCL probes its kernels with them, and fusor checks every call's status itself."
  if [ -z "$sanitizer" ]; then
    SECONDS_TAKEN=0; OUTPUT_FILE=/dev/null
    record sanitizer "compute-sanitizer" "FAILED: not found on this machine"
    end_section
    return
  fi
  for tool in ${tools//,/ }; do
    [ "$tool" = initcheck ] && initcheck_probe "$sanitizer"
    for bin in $bins; do
      say "$tool $(basename "$bin")"
      run_logged "$tool $(basename "$bin")" "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 \
        --report-api-errors no \
        "$bin" --test-suite-exclude=large
      errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$OUTPUT_FILE" | tail -1 || true)
      if [ "$RC" -eq 86 ]; then record sanitizer "$tool: $(basename "$bin")" "FAILED: sanitizer errors" "$errors"
      else record sanitizer "$tool: $(basename "$bin")" "$(verdict_of)" "$errors"; fi
      rm -f "$OUTPUT_FILE"
    done
  done
  end_section
}

# Whether initcheck sees cuBLAS's writes here: a GEMM into a fresh buffer, then
# a copy of it to the host (tests/gpu_check/initcheck_probe.cu). Where it does
# not (an H200 with CUDA 13.0), every read of a GEMM's output is reported as
# uninitialised: the report says so, so that such reports are not taken for
# fusor's. The probe's own verdict (its values right) is a row like any other.
initcheck_probe() {
  local probe="$UNPACKED/bin/probes/initcheck_probe"
  [ -x "$probe" ] || return 0
  say "initcheck probe"
  run_logged "initcheck probe" "$1" --tool initcheck --error-exitcode 86 --print-limit 1 "$probe"
  local errors
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$OUTPUT_FILE" | tail -1 || true)
  if [ "$RC" -eq 86 ]; then
    record sanitizer "initcheck probe: a cuBLAS GEMM's output copied to the host" passed \
      "initcheck does NOT see cuBLAS's writes here ($errors on the copy): its reports of reads of a GEMM's output are not evidence"
  else
    record sanitizer "initcheck probe: a cuBLAS GEMM's output copied to the host" "$(verdict_of)" \
      "initcheck sees cuBLAS's writes here: every report below is a real read of unwritten memory"
  fi
  rm -f "$OUTPUT_FILE"
}

phase_bench() {
  local bin kit="$2"
  { echo; echo "## Benchmarks"; echo; echo "Each CUDA benchmark's own tables (CUDA events, medians; ratios are to the peer measured in the same run)."; } >>"$REPORT"
  : >"$REPORT.failures"
  local outputs name baseline target commit
  outputs=$(mktemp -d)
  for bin in $1; do
    say "bench $(basename "$bin")"
    run_logged "bench $(basename "$bin")" "$bin"
    { echo; echo "### $(basename "$bin")"; echo; cat "$OUTPUT_FILE"; } >>"$REPORT"
    record bench "$(basename "$bin")" "$(verdict_of)"
    cp "$OUTPUT_FILE" "$outputs/$(basename "$bin").md"
    rm -f "$OUTPUT_FILE"
  done
  # Baselines (FUSOR_GPU_BASELINES at build): an earlier commit's benchmark,
  # run now on the same card, beside this kit's.
  for baseline in $(bins baseline); do
    name=$(basename "$baseline")
    target=${name%@*}
    commit=${name#*@}
    say "bench $target at $commit (baseline)"
    run_logged "bench $name" "$baseline"
    { echo; echo "### $target at $commit (baseline)"; echo; cat "$OUTPUT_FILE"; } >>"$REPORT"
    record bench "$name" "$(verdict_of)"
    if [ -f "$outputs/$target.md" ] && command -v python3 >/dev/null; then
      cp "$OUTPUT_FILE" "$outputs/$name.md"
      rm -f "$OUTPUT_FILE"
      run_logged "compare $target" python3 "$UNPACKED/bench/compare_bench.py" "$outputs/$name.md" "$outputs/$target.md"
      { echo; echo "### $target: $commit against this kit (scripts/compare_bench.py; above 1: this kit faster)"; echo
        cat "$OUTPUT_FILE"; } >>"$REPORT"
    fi
    rm -f "$OUTPUT_FILE"
  done
  rm -rf "$outputs"
  local mlp="$UNPACKED/bin/examples/fashion_mnist_mlp_cuda"
  if [ -n "$only" ]; then
    echo "PyTorch comparisons left out (--only $only)." >>"$REPORT"
  elif [ -x "$mlp" ] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    say "bench train_mlp_gpu.py (fusor vs PyTorch)"
    run_logged "bench train_mlp_gpu.py" python3 "$UNPACKED/bench/train_mlp_gpu.py" --fusor-binary "$mlp" \
      --data "$kit/data/fashion-mnist"
    { echo; echo "### MLP training step: fusor vs PyTorch (bench/train_mlp_gpu.py)"; echo; cat "$OUTPUT_FILE"; } >>"$REPORT"
    record bench "train_mlp_gpu.py" "$(verdict_of)"
    rm -f "$OUTPUT_FILE"
    local script title
    for script in rowwise_torch_gpu attention_torch_gpu; do
      case "$script" in
        rowwise_torch_gpu) title="Row-wise kernels in PyTorch on the same GPU" ;;
        attention_torch_gpu) title="Causal attention in PyTorch on the same GPU" ;;
      esac
      say "bench $script.py"
      run_logged "bench $script.py" python3 "$UNPACKED/bench/$script.py"
      { echo; echo "### $title (bench/$script.py)"; echo; cat "$OUTPUT_FILE"; } >>"$REPORT"
      record bench "$script.py" "$(verdict_of)"
      rm -f "$OUTPUT_FILE"
    done
  else
    echo "PyTorch with CUDA is not on this machine: no PyTorch comparison." >>"$REPORT"
  fi
  end_section
}

phase_examples() {
  local bin kit="$2" epochs="$3" name required args final
  begin_section "Examples" "Fashion-MNIST at $epochs epochs; at 10 epochs the MLP must reach ${HOST_ACCURACY_MLP} and the CNN ${HOST_ACCURACY_CNN} (the host's fp32 accuracy) less ${ACCURACY_SLACK}."
  for bin in $1; do
    name=$(basename "$bin")
    args=()
    required=""
    case "$name" in
      fashion_mnist_mlp_cuda) required=$HOST_ACCURACY_MLP ;;
      fashion_mnist_cnn_cuda) required=$HOST_ACCURACY_CNN ;;
      quickstart_cuda) ;;
      # ctest's check of the character GPT (examples/CMakeLists.txt), on the GPU.
      gpt_char_cuda) args=(--data "$UNPACKED/data/shakespeare.txt" --steps 150 --eval-every 150 --eval-batches 8
                           --batch 16 --generate 80 --quiet --require-below-baseline 0.5 --device cuda) ;;
      *) args=(--data "$kit/data/fashion-mnist" --epochs "$epochs" --quiet --device cuda) ;;
    esac
    if [ -n "$required" ]; then
      # --device cuda: exit 77 (reported as "skipped") rather than a host run.
      args=(--data "$kit/data/fashion-mnist" --epochs "$epochs" --quiet --device cuda)
      [ "$epochs" -eq 10 ] && args+=(--require-accuracy "$(awk -v a="$required" -v s="$ACCURACY_SLACK" 'BEGIN { printf "%.4f", a - s }')")
    fi
    say "example $name"
    run_logged "example $name" "$bin" "${args[@]}"
    final=$(grep -E '^final test accuracy|samples/s|^validation loss|tokens/s' "$OUTPUT_FILE" | tail -2 | tr '\n' ' ' || true)
    record examples "$name" "$(verdict_of)" "$final"
    rm -f "$OUTPUT_FILE"
    if [ "$name" = gpt_char_cuda ]; then
      # The nanoGPT-sized model's training speed: the last progress line's tokens/s.
      say "example $name --model nanogpt (tokens/s)"
      run_logged "example $name --model nanogpt" "$bin" --data "$UNPACKED/data/shakespeare.txt" --model nanogpt \
        --steps 60 --eval-every 60 --eval-batches 2 --generate 0 --device cuda
      final=$(tr '\r' '\n' <"$OUTPUT_FILE" | grep -E 'tokens/s|parameters' | sed -n '1p;$p' | tr '\n' ' ' || true)
      record examples "$name --model nanogpt, 60 steps" "$(verdict_of)" "$final"
      rm -f "$OUTPUT_FILE"
    fi
  done
  end_section
}

case "${1:-}" in
  build) shift; kit_build "$@" ;;
  run) shift; kit_run "$@" ;;
  *) sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
