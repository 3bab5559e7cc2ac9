#!/usr/bin/env bash
# scripts/run_tests.sh — everything from a fresh Debian machine with the CUDA
# Toolkit to a test report: installs what is missing (apt-get), configures build/
# (Release), builds everything with all cores and runs the whole suite with
# ctest. Exits non-zero when anything fails. Arguments go to ctest, e.g.
#
#   bash scripts/run_tests.sh
#   bash scripts/run_tests.sh -R core_host
#
# Without a GPU the CUDA test binaries are built and print "skipped: no GPU";
# ctest reports them as skipped, not passed.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fusor_setup

fusor_say "building with $FUSOR_JOBS jobs"
cmake --build "$FUSOR_BUILD" --parallel "$FUSOR_JOBS"

fusor_say "running the tests"
cd "$FUSOR_BUILD"
# ctest runs FUSOR_JOBS tests at once, each with an OpenMP thread a core: threads
# that spin while they wait for work take the cores the other test needs.
# Waiting passively, a run of eight of the longest tests took 108 s against
# 143 s on 2 cores (one thread a test: 115 s, and no test of many threads).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
ctest --output-on-failure --parallel "$FUSOR_JOBS" "$@"
