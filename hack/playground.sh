#!/usr/bin/env bash
# A local playground: provisions the pinned servers, builds the controller, the example worker
# and twc-local-env, then starts a local control plane + Temporal dev server + the controller,
# with the image example.com/hello-worker:<any tag> running the example worker. It prints a
# ClusterConnection + WorkerDeployment to `kubectl apply` and the commands to watch a real
# rollout; Ctrl-C stops everything. `hack/playground.sh --exit-when-ready` applies them itself,
# waits for the rollout and stops (the test suite runs that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
cargo build -q -p twc-example-worker -p temporal-worker-controller -p twc-testenv --bins
exec "${CARGO_TARGET_DIR:-target}/debug/twc-local-env" --playground "$@"
