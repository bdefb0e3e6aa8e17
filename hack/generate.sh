#!/usr/bin/env bash
# Writes every generated file (CRD YAML; later RBAC and chart parts) from the code. With
# --check, fails if a checked-in file differs from what the code generates, naming this command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
check=false
[ "${1:-}" = "--check" ] && check=true

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build -q --bin twc
twc=${CARGO_TARGET_DIR:-target}/debug/twc

# Generated directories, each written whole by one command.
"$twc" crd --dir "$out/config/crd"
"$twc" rbac --dir "$out/config/rbac"
generated=(config/crd config/rbac)

if $check; then
  status=0
  for d in "${generated[@]}"; do
    if ! diff -ruN "$d" "$out/$d" >/dev/null; then
      echo "generate: $d is out of date:" >&2
      diff -ruN "$d" "$out/$d" | head -40 >&2 || true
      status=1
    fi
  done
  if [ $status -ne 0 ]; then
    echo "generate: run 'hack/generate.sh' and commit the result" >&2
    exit 1
  fi
  echo "generate: all generated files are up to date"
else
  for d in "${generated[@]}"; do
    rm -rf "$d"
    mkdir -p "$(dirname "$d")"
    cp -r "$out/$d" "$d"
  done
  echo "generate: wrote ${generated[*]}"
fi
