#!/usr/bin/env bash
# Lints both Helm charts with the Helm that hack/provision.sh built (HELM_VERSION in
# hack/versions.env), with the default values and in namespace-scoped mode. CI runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=versions.env
. hack/versions.env
cache=${TWC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twc-rs}
helm=${TWC_HELM:-$cache/helm-v$HELM_VERSION/helm}
[ -x "$helm" ] || { echo "lint-charts: no helm at $helm: run hack/provision.sh" >&2; exit 1; }

"$helm" lint --strict charts/temporal-worker-controller-crds charts/temporal-worker-controller
"$helm" lint --strict charts/temporal-worker-controller \
  --set rbac.scope=namespaced --set 'watchNamespaces={team-a,team-b}' \
  --set metrics.serviceMonitor.enabled=true
