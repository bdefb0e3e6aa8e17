#!/usr/bin/env bash
# Writes every generated file (CRD YAML, RBAC, chart parts). With --check, fails if any
# checked-in file differs from what the code generates, naming this command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=false
[ "${1:-}" = "--check" ] && check=true

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Each generator writes into $out, mirroring the repository layout.
generators=()
if [ ${#generators[@]} -eq 0 ]; then
  echo "generate: nothing to generate yet"
  exit 0
fi
