#!/bin/sh
# tests/comm/expect_job_failure.sh SECONDS PATTERN COMMAND... — passes when
# COMMAND (an mpirun job that must fail) ends within SECONDS, with a non-zero
# status, and its output contains PATTERN (grep -E). The job is killed at
# SECONDS + 30 so a hang fails the test instead of holding ctest.
limit="$1"; pattern="$2"; shift 2
start=$(date +%s)
out=$(timeout $((limit + 30)) "$@" 2>&1); rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "expect_job_failure: status $rc after ${elapsed} s (limit ${limit} s)"
[ "$rc" -ne 0 ] || { echo "expect_job_failure: the job succeeded; it must fail"; exit 1; }
[ "$rc" -ne 124 ] || { echo "expect_job_failure: the job hung (killed after $((limit + 30)) s)"; exit 1; }
[ "$elapsed" -le "$limit" ] || { echo "expect_job_failure: the job took ${elapsed} s, more than ${limit} s"; exit 1; }
echo "$out" | grep -Eq "$pattern" || { echo "expect_job_failure: the output does not match: $pattern"; exit 1; }
echo "expect_job_failure: passed"
