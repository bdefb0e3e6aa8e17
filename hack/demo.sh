#!/usr/bin/env bash
# The main job, as a user would install it: provisions the pinned servers, builds the controller
# and example worker images (hack/image.sh), starts a real node (a local control plane, the
# Temporal dev server, containerd, a kubelet, kube-proxy, kube-scheduler; needs root),
# `helm install`s the CRDs and controller charts with the image built here, then runs a real
# rollout of the example worker, v1 -> v2 (Progressive), shown live (twc-demo).
#
#   hack/demo.sh                 the above
#   hack/demo.sh --ci            non-interactive: also checks the final state, non-zero on failure
#   hack/demo.sh --pod-runner    no root needed: the controller as a local process and the
#                                workers run by the pod runner (the kubelet stand-in); no images
#   hack/demo.sh --groups        the same with two worker groups in one version: a workflow
#                                worker and an activity-only worker on its own task queue
#   hack/demo.sh --release       the images from release binaries (LTO: about 13 minutes more on
#                                2 cores the first time) instead of the debug build
#   hack/demo.sh --dir DIR       data and logs (default target/demo); --timeout SECONDS
#
# The images are built from the debug binaries by default: twc-demo itself needs the debug build
# of the controller's library, so they cost seconds more, where a release build is a second
# full build with LTO. For just the environment, ready for kubectl:
# `cargo run -p twc-testenv --bin twc-local-env`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=dev
node=true
args=()
for a in "$@"; do
  case "$a" in
    --release) profile=release ;;
    --pod-runner) node=false; args+=("$a") ;;
    -h | --help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
      exit 0 ;;
    *) args+=("$a") ;;
  esac
done

hack/provision.sh
# The demo, the controller and the worker in one build: their dependencies are compiled once,
# with one set of features (built apart, most of them twice: 9 + 8 minutes cold on 2 cores).
cargo build -q -p twc-demo -p temporal-worker-controller -p twc-example-worker \
  --bin twc-demo --bin twc --bin twc-example-worker
demo=${CARGO_TARGET_DIR:-target}/debug/twc-demo
if $node; then
  # Before building images: name what this machine lacks for a real node, if anything.
  "$demo" --check-node
  if [ "$profile" = dev ]; then
    hack/image.sh --profile dev --no-build
  else
    hack/image.sh --profile release
  fi
fi
exec "$demo" ${args[@]+"${args[@]}"}
