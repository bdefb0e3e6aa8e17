#!/usr/bin/env bash
# The test command: provisions the pinned servers (seconds when cached), then runs every test
# against the real kube-apiserver, kube-controller-manager and Temporal dev server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
# The binaries tests run as processes (the controller, the example worker), never stale.
cargo build -q --workspace --bins
cargo test --workspace "$@"
