#!/usr/bin/env bash
# Lints both Helm charts with the Helm that hack/provision.sh built (HELM_VERSION in
# hack/versions.env): with the default values, in namespace-scoped mode, and with TWC's chart's
# values file; and checks that the controller chart's values.schema.json rejects an unknown
# key. CI runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=versions.env
. hack/versions.env
cache=${TWC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/twc-rs}
helm=${TWC_HELM:-$cache/helm-v$HELM_VERSION/helm}
[ -x "$helm" ] || { echo "lint-charts: no helm at $helm: run hack/provision.sh" >&2; exit 1; }
chart=charts/temporal-worker-controller

"$helm" lint --strict charts/temporal-worker-controller-crds "$chart"
"$helm" lint --strict "$chart" \
  --set rbac.scope=namespaced --set 'watchNamespaces={team-a,team-b}' \
  --set metrics.serviceMonitor.enabled=true --set grafanaDashboard.enabled=true
"$helm" lint --strict "$chart" -f crates/controller/tests/fixtures/twc-values.yaml
if out=$("$helm" lint "$chart" --set replica=2 2>&1); then
  echo "lint-charts: $chart/values.schema.json accepts the unknown key 'replica'" >&2
  exit 1
fi
grep -q "'replica'" <<<"$out" ||
  { echo "lint-charts: the schema error does not name the key:" >&2; echo "$out" >&2; exit 1; }
