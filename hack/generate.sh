#!/usr/bin/env bash
# Writes every generated file (CRD YAML, RBAC, the chart parts made from them, and the Go-derived
# tables of crates/gocompat) from the code. With --check, fails if a checked-in file differs from
# what the code generates, naming this command.
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
# The charts read verbatim copies with .Files.Get: the CRDs chart adds only its keep policy and
# labels to each CRD; the controller chart takes the rules of each role, renaming the roles.
crd_chart=charts/temporal-worker-controller-crds
chart=charts/temporal-worker-controller
mkdir -p "$out/$crd_chart/files" "$out/$chart/files"
cp -r "$out/config/crd" "$out/$crd_chart/files/crd"
cp -r "$out/config/rbac" "$out/$chart/files/rbac"
# The admission policies are written by hand in config/admission; the chart reads a copy.
cp -r config/admission "$out/$chart/files/admission"
generated=(config/crd config/rbac "$crd_chart/files/crd" "$chart/files/rbac" "$chart/files/admission")

# crates/gocompat: the encoding/json field table of corev1.PodTemplateSpec and the test tables,
# written by the Go program in hack/gofields from the Go libraries TWC uses (Go's build cache
# keeps this cheap after the first run).
gocompat=crates/gocompat
(cd hack/gofields && GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o "$out/gofields" .)
mkdir -p "$out/$gocompat/src" "$out/$gocompat/tests/data"
"$out/gofields" fields | rustfmt --edition 2024 >"$out/$gocompat/src/fields.rs"
for table in quantities.tsv references.tsv templates.jsonl; do
  "$out/gofields" "${table%.*}" >"$out/$gocompat/tests/data/$table"
done
generated+=("$gocompat/src/fields.rs" "$gocompat/tests/data/quantities.tsv"
  "$gocompat/tests/data/references.tsv" "$gocompat/tests/data/templates.jsonl")

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
