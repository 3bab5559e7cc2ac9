#!/usr/bin/env bash
# scripts/run_main.sh — everything from a fresh Debian machine with the CUDA
# Toolkit to a running example: installs what is missing (apt-get), configures
# build/ (Release), builds the examples with all cores and runs the quickstart
# (on the GPU too, with quickstart_cuda, when CUDA is on).
#
#   bash scripts/run_main.sh
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fusor_setup

targets=(quickstart)
if fusor_cuda_enabled; then targets+=(quickstart_cuda); fi
fusor_say "building ${targets[*]} with $FUSOR_JOBS jobs"
cmake --build "$FUSOR_BUILD" --parallel "$FUSOR_JOBS" --target "${targets[@]}"

for t in "${targets[@]}"; do
  fusor_say "running $t"
  "$FUSOR_BUILD/examples/$t"
done
