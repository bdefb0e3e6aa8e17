#!/usr/bin/env bash
# The main job on the embedded default: provisions the pinned servers, then starts the local
# control plane, the Temporal dev server and the pod runner. Extra arguments go to
# twc-local-env (try --help).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
cargo run -q -p twc-testenv --bin twc-local-env -- "$@"
