#!/usr/bin/env bash
# scripts/run_sanitized_tests.sh — the host test suites built with
# AddressSanitizer and UndefinedBehaviorSanitizer (build-sanitize/, -Og -g1:
# line tables name file and line in every report, and compile in 40% of -O1 -g's
# time; CUDA off, no benchmarks or examples) and run with every report fatal:
# a heap overflow, a use after free, a leak, signed overflow, a misaligned or
# null access, a shift out of range each stop the test with the report.
#
#   bash scripts/run_sanitized_tests.sh                 # every host suite (ctest -R '_host$')
#   FUSOR_SANITIZE_SUITES="core io" bash scripts/run_sanitized_tests.sh   # these suites only
#
# CI (.ci/run) runs, within its time budget, a named subset that exercises
# every host header: the suites that read untrusted bytes and hold the memory
# plumbing (core, io, data, parallel_checkpoint), the small ones (app, comm,
# large_tensors), core_emulated (the cuda executor's pass kernels under the
# SIMT emulator: their vector reads of host memory), and sanitize_cover (tests/suites/sanitize_cover.cmake: the
# cheapest test sources of the other suites that exercise the rest: conv2d,
# the GPT layers, composition, data parallel, pipelines, PowerSGD, rmsnorm).
# Of the whole set the row-wise suite runs longest: about 8 min on 2 cores (6.3
# million checks, its kernels under the SIMT emulator).
# The MPI headers are exercised by the comm MPI suite (below); the CUDA ones
# (comm/nccl*, the *_cuda kernels) by scripts/gpu_check.sh's compute-sanitizer.
#
# The MPI suites of FUSOR_SANITIZE_MPI_SUITES (default: comm, the MPI
# communicator and its watchdog) run under mpirun with leak detection off:
# OpenMPI's components, unloaded at MPI_Finalize, leave allocations the leak
# checker cannot name or suppress; every other report stays fatal.
#   FUSOR_SANITIZE_MPI_SUITES="" bash scripts/run_sanitized_tests.sh   # no MPI suite
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fusor_install_packages
fusor_find_cuda
build="${FUSOR_SANITIZE_BUILD_DIR:-$FUSOR_ROOT/build-sanitize}"
# Ninja for a new tree (common.sh): CI's subset built in 3.9 min against make's 5.9 on 2 cores.
fusor_generator_args "$build" generator
fusor_say "configuring $build (AddressSanitizer + UndefinedBehaviorSanitizer)"
cmake "${generator[@]}" -S "$FUSOR_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-Og -g1" \
  -DFUSOR_SANITIZE=address,undefined -DFUSOR_ENABLE_CUDA=OFF -DFUSOR_BUILD_BENCHMARKS=OFF -DFUSOR_BUILD_EXAMPLES=OFF

# Only the host suites' binaries: fusor_<suite>_tests (those of FUSOR_SANITIZE_SUITES when set).
if [ -n "${FUSOR_SANITIZE_SUITES:-}" ]; then
  read -r -a suites <<<"$FUSOR_SANITIZE_SUITES"
  targets=("${suites[@]/#/fusor_}")
  targets=("${targets[@]/%/_tests}")
  tests_filter=(-R "^($(IFS='|'; echo "${suites[*]}"))_host\$")
else
  mapfile -t targets < <(fusor_build_targets "$build" | grep -x 'fusor_[a-z_]*_tests' |
                         grep -v -e '_mpi_tests$' -e '_cuda_tests$' -e '^fusor_sanitize_cover_tests$')
  tests_filter=(-R '_host$' -E '^sanitize_cover_host$')  # its sources run in their own suites
fi
mpi_suites=()
if [ $# -eq 0 ]; then  # (where MPI was found: the suites' targets exist)
  known_targets=$(fusor_build_targets "$build")
  for suite in ${FUSOR_SANITIZE_MPI_SUITES-comm}; do
    if grep -qx "fusor_${suite}_mpi_tests" <<<"$known_targets"; then
      mpi_suites+=("$suite")
      targets+=("fusor_${suite}_mpi_tests")
    fi
  done
fi
fusor_say "building ${#targets[@]} sanitized test programs with $FUSOR_JOBS jobs"
cmake --build "$build" --parallel "$FUSOR_JOBS" --target "${targets[@]}"

# allocator_may_return_null: the tests of allocations larger than memory expect fusor's own error.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
fusor_say "running the sanitized host suites"
cd "$build"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"  # several suites at once: see run_tests.sh
if [ $# -gt 0 ]; then
  ctest --output-on-failure --parallel "$FUSOR_JOBS" "$@"
  exit
fi
ctest --output-on-failure --parallel "$FUSOR_JOBS" "${tests_filter[@]}"
if [ ${#mpi_suites[@]} -gt 0 ]; then
  fusor_say "running the sanitized MPI suites (${mpi_suites[*]}) without leak detection"
  ASAN_OPTIONS="${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0}" \
    ctest --output-on-failure -R "^($(IFS='|'; echo "${mpi_suites[*]}"))_mpi_np[0-9]+\$"
fi
