#!/usr/bin/env bash
# scripts/compile_time.sh — how long the training program takes to compile
# (issue 16), header-only and with fusor's compiled parts (fusor::runtime,
# FUSOR_SEPARATE_COMPILATION), with and without a precompiled header; g++ and,
# when the build has it, nvcc. Prints a Markdown table for bench/RESULTS.md.
#
#   scripts/compile_time.sh [BUILD_DIR] [RUNS]     # defaults: build 3
#   COMPILE_TIME_VARIANTS="separate_pch nvcc_separate" scripts/compile_time.sh   # only those rows
#
# The program is examples/fashion_mnist_mlp.cpp, compiled with the build's own
# flags (BUILD_DIR/examples/CMakeFiles/fashion_mnist_mlp.dir/flags.make); like
# fusor's libraries, the examples' helper library (fashion_mnist_training.cpp,
# compiled once for every example) is not counted. Each
# figure is the least wall time of RUNS compiles (the least is the one the
# machine's other work disturbed least), the variants taking turns.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
runs=${2:-3}
flags_file=$build/examples/CMakeFiles/fashion_mnist_mlp.dir/flags.make
[[ -f $flags_file ]] || { echo "compile_time.sh: $flags_file is missing: configure $build with the examples first" >&2; exit 1; }
flag() { sed -n "s/^$1 = //p" "$2"; }

source=$root/examples/fashion_mnist_mlp.cpp
# Header-only: the build's flags without the runtime library's define.
cxx_flags="$(flag CXX_FLAGS "$flags_file") $(flag CXX_INCLUDES "$flags_file") -I$root/examples"
cxx_defines=$(flag CXX_DEFINES "$flags_file" | sed 's/-DFUSOR_SEPARATE_COMPILATION//')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The precompiled header the examples share, as the build generated it from
# examples/CMakeLists.txt's fusor_examples_pch_headers (FUSOR_EXAMPLES_PCH).
pch_source=$build/examples/CMakeFiles/fusor_examples_pch.dir/cmake_pch.hxx
variants=(header_only separate)
if [[ -f $pch_source ]]; then
  cp "$pch_source" "$work/pch.hpp"
  # shellcheck disable=SC2086
  c++ $cxx_defines -DFUSOR_SEPARATE_COMPILATION $cxx_flags -x c++-header "$work/pch.hpp" -o "$work/pch.hpp.gch"
  variants+=(separate_pch)
else
  echo "compile_time.sh: $pch_source is missing (FUSOR_EXAMPLES_PCH off?): no precompiled-header figure" >&2
fi

declare -A best
cuda_flags_file=$build/examples/CMakeFiles/fashion_mnist_mlp_cuda.dir/flags.make
if [[ -f $cuda_flags_file ]] && command -v nvcc > /dev/null; then
  variants+=(nvcc_header_only nvcc_separate)
  cuda_rsp=$build/examples/CMakeFiles/fashion_mnist_mlp_cuda.dir/includes_CUDA.rsp
  cuda_flags="$(flag CUDA_FLAGS "$cuda_flags_file") --options-file $cuda_rsp"
  # The _cuda example's defines: FUSOR_SEPARATE_COMPILATION, and FUSOR_CUDA_SEPARATE_COMPILATION
  # where the build made fusor::cuda_runtime (the GPU path's common instances precompiled).
  cuda_defines=$(flag CUDA_DEFINES "$cuda_flags_file")
fi

# COMPILE_TIME_VARIANTS="separate_pch nvcc_separate" (say) times only those.
if [[ -n ${COMPILE_TIME_VARIANTS:-} ]]; then
  wanted=()
  for v in "${variants[@]}"; do [[ " $COMPILE_TIME_VARIANTS " == *" $v "* ]] && wanted+=("$v"); done
  ((${#wanted[@]})) || { echo "compile_time.sh: none of '$COMPILE_TIME_VARIANTS' is among: ${variants[*]}" >&2; exit 2; }
  variants=("${wanted[@]}")
fi

compile() {
  # shellcheck disable=SC2086
  case $1 in
    header_only) c++ $cxx_defines $cxx_flags -c "$source" -o "$work/a.o" ;;
    separate) c++ $cxx_defines -DFUSOR_SEPARATE_COMPILATION $cxx_flags -c "$source" -o "$work/a.o" ;;
    separate_pch) c++ $cxx_defines -DFUSOR_SEPARATE_COMPILATION $cxx_flags -Winvalid-pch -include "$work/pch.hpp" \
                    -c "$source" -o "$work/a.o" ;;
    nvcc_header_only) (cd "$build/examples" && nvcc $cuda_flags -x cu -c "$source" -o "$work/a.o") ;;
    nvcc_separate) (cd "$build/examples" && nvcc $cuda_defines $cuda_flags -x cu -c "$source" -o "$work/a.o") ;;
  esac
}

for ((run = 0; run < runs; ++run)); do
  for v in "${variants[@]}"; do
    start=$(date +%s.%N)
    compile "$v" 2> "$work/log" || { cat "$work/log" >&2; exit 1; }
    seconds=$(echo "$(date +%s.%N) - $start" | bc)
    if [[ -z ${best[$v]:-} ]] || (($(echo "$seconds < ${best[$v]}" | bc))); then best[$v]=$seconds; fi
  done
done

describe() {
  case $1 in
    header_only) echo "g++, header only (fusor::fusor)" ;;
    separate) echo "g++, fusor::runtime linked (FUSOR_SEPARATE_COMPILATION)" ;;
    separate_pch) echo "g++, fusor::runtime + the examples' precompiled header" ;;
    nvcc_header_only) echo "nvcc, header only" ;;
    nvcc_separate)
      if [[ $cuda_defines == *FUSOR_CUDA_SEPARATE_COMPILATION* ]]; then echo "nvcc, fusor::runtime + fusor::cuda_runtime linked"
      else echo "nvcc, fusor::runtime linked"; fi ;;
  esac
}
echo "| examples/fashion_mnist_mlp.cpp, $(flag CXX_FLAGS "$flags_file" | grep -o -- '-O[0-3s]' | head -1) | seconds (least of $runs) |"
echo "|---|---:|"
for v in "${variants[@]}"; do printf '| %s | %.1f |\n' "$(describe "$v")" "${best[$v]}"; done
