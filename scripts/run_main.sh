#!/usr/bin/env bash
# scripts/run_main.sh — fusor's main job, from a fresh Debian machine with the
# CUDA Toolkit: installs what is missing (apt-get, including Debian's
# dataset-fashion-mnist), configures build/ (Release), builds the examples with
# all cores, runs the quickstart, then trains the MLP on Fashion-MNIST
# (fashion_mnist_mlp: 10 epochs, progress bar, loss, test accuracy, samples/s;
# on the GPU when CUDA is on and a GPU is present, else on the host).
# Arguments are passed to fashion_mnist_mlp (e.g. --epochs 3; --help lists them).
#
#   bash scripts/run_main.sh [fashion_mnist_mlp options]
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fusor_setup

quickstart=quickstart
trainer=fashion_mnist_mlp
if fusor_cuda_enabled; then
  quickstart=quickstart_cuda
  trainer=fashion_mnist_mlp_cuda
fi
fusor_say "building $quickstart and $trainer with $FUSOR_JOBS jobs"
cmake --build "$FUSOR_BUILD" --parallel "$FUSOR_JOBS" --target "$quickstart" "$trainer"

fusor_say "running $quickstart"
"$FUSOR_BUILD/examples/$quickstart"

fusor_say "training on Fashion-MNIST: $trainer $*"
# OpenMP's passive wait keeps fusor's idle threads from competing with OpenBLAS's.
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" "$FUSOR_BUILD/examples/$trainer" "$@"
