#!/usr/bin/env bash
# The test command: provisions the pinned servers (seconds when cached), then runs every test
# against the real kube-apiserver, kube-controller-manager and Temporal dev server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
cargo test --workspace "$@"
