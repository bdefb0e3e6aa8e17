//! The namespace-scoped install (`--namespace-scoped`): the controller replicas run as a
//! ServiceAccount with only the RBAC `twc rbac --mode namespaced` generates (a Role and its
//! RoleBinding in the run's namespace, the ClusterRole every install needs, the leader-election
//! Role where the Lease is) and watch only the run's namespace. A namespace-scoped install
//! cannot use a ClusterConnection: every WorkerDeployment is on the namespaced Connection, half
//! by the legacy `name`, half by `objectRef`.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use twc_testenv::api_proxy::ApiProxy;
use twc_testenv::control_plane::ControlPlane;

/// The ServiceAccount the replicas run as, in [`SERVICE_ACCOUNT_NAMESPACE`] (where the Lease
/// is; never the run's namespace, which the fault deletes).
const SERVICE_ACCOUNT: &str = "twc-chaos";
const SERVICE_ACCOUNT_NAMESPACE: &str = "default";
/// The replicas' token outlives the longest run.
const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// WorkerDeployment `i`'s reference to the Connection: by the legacy `name` (even), or by
/// `objectRef` (odd).
pub(crate) fn connection_ref(i: usize) -> serde_json::Value {
    if i.is_multiple_of(2) {
        serde_json::json!({"name": crate::CONNECTION})
    } else {
        serde_json::json!({"objectRef": {"apiGroup": "temporal.io", "kind": "Connection", "name": crate::CONNECTION}})
    }
}

/// Grants the install's RBAC for watched namespace `ns` (and the cluster-wide part, again:
/// applying is idempotent), as an administrator or the chart would.
pub(crate) async fn grant(client: &Client, ns: &str) -> anyhow::Result<()> {
    let install = twc_controller::rbac::bindings(
        SERVICE_ACCOUNT,
        SERVICE_ACCOUNT_NAMESPACE,
        &[ns.to_string()],
    );
    let sa = &install.service_account;
    apply(namespaced(client, sa), sa).await?;
    for r in &install.cluster_roles {
        apply(Api::<ClusterRole>::all(client.clone()), r).await?;
    }
    for b in &install.cluster_role_bindings {
        apply(Api::<ClusterRoleBinding>::all(client.clone()), b).await?;
    }
    for r in &install.roles {
        apply(namespaced(client, r), r).await?;
    }
    for b in &install.role_bindings {
        apply(namespaced(client, b), b).await?;
    }
    Ok(())
}

fn namespaced<K>(client: &Client, obj: &K) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default())
}

/// Server-side applies `obj` through `api`.
async fn apply<K>(api: Api<K>, obj: &K) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    // k8s-openapi's types carry their apiVersion and kind when serialized.
    let value = serde_json::to_value(obj)?;
    api.patch(
        &obj.name_any(),
        &PatchParams::apply("twc-chaos").force(),
        &Patch::Apply(&value),
    )
    .await?;
    Ok(())
}

/// Writes the replicas' kubeconfig to `path`: the ServiceAccount's, through `api_proxy`.
pub(crate) async fn write_kubeconfig(
    cp: &ControlPlane,
    api_proxy: &ApiProxy,
    path: &Path,
) -> anyhow::Result<()> {
    let kubeconfig = cp
        .service_account_kubeconfig(SERVICE_ACCOUNT_NAMESPACE, SERVICE_ACCOUNT, TOKEN_LIFETIME)
        .await?;
    api_proxy.write_kubeconfig(kubeconfig, path)?;
    Ok(())
}
