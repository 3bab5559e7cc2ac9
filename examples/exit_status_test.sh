#!/usr/bin/env bash
# examples/exit_status_test.sh CODE TEXT PROGRAM [ARGS...] — runs PROGRAM and
# passes when it exits with status CODE and its output contains TEXT: how the
# examples' documented exit statuses (2 the command line, 1 the data or a
# checkpoint) are tested.
set -uo pipefail
want_code="$1" want_text="$2"
shift 2
output="$("$@" 2>&1)"
code=$?
printf '%s\n' "$output"
if [ "$code" -ne "$want_code" ]; then echo "exit_status_test: exit status $code, expected $want_code"; exit 1; fi
if [[ "$output" != *"$want_text"* ]]; then echo "exit_status_test: the output does not say '$want_text'"; exit 1; fi
echo "exit_status_test: status $code and '$want_text', as documented"
