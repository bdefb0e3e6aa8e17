#!/usr/bin/env bash
# The main job on the embedded default: provisions the pinned servers, then runs a real rollout
# on a local control plane + Temporal dev server + the controller + the example worker, shown
# live (twc-demo). `hack/demo.sh --ci` also checks the final state. For just the environment,
# ready for kubectl: `cargo run -p twc-testenv --bin twc-local-env`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
cargo build -q -p twc-example-worker -p temporal-worker-controller --bins
cargo run -q -p twc-demo -- "$@"
