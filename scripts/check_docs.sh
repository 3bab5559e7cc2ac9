#!/usr/bin/env bash
# scripts/check_docs.sh — builds the API reference with Doxygen (docs/Doxyfile.in)
# into build-docs/ and lists what it warns about, per file. Exit status 1 when
# anything is undocumented. Optional arguments: path prefixes under
# include/fusor/ to show only those files' warnings, e.g.
#
#   bash scripts/check_docs.sh            # everything
#   bash scripts/check_docs.sh nn/ core/tensor.hpp
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${FUSOR_DOCS_DIR:-$root/build-docs}"
mkdir -p "$out"
sed -e "s|@PROJECT_VERSION@|dev|; s|@FUSOR_DOCS_OUTPUT@|$out|g; s|@FUSOR_SOURCE_DIR@|$root|g" \
  "$root/docs/Doxyfile.in" >"$out/Doxyfile"
doxygen "$out/Doxyfile" >/dev/null 2>&1 || { echo "doxygen failed"; exit 2; }
warnings="$out/warnings.txt"
if [ $# -gt 0 ]; then
  pattern=$(printf '%s\n' "$@" | sed "s|^|^$root/include/fusor/|")
  grep -E "$(echo "$pattern" | paste -sd'|')" "$warnings" || true
else
  cat "$warnings"
fi
count=$(wc -l <"$warnings")
echo "$count warning(s) in all of include/fusor (full list: $warnings)"
[ "$count" -eq 0 ]
