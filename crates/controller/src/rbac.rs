//! The RBAC the controller needs, listing exactly the verbs it uses. `twc rbac` prints it and
//! `hack/generate.sh` writes `config/rbac/` (checked for drift in CI).
//!
//! * Cluster-scoped kinds (ClusterConnections, SelfSubjectAccessReviews, the controller's own
//!   Namespace read for the default identity) are always in a ClusterRole, never a Role.
//! * Namespaced kinds are in a ClusterRole for a cluster-wide install, and in a Role bound in
//!   each watched namespace for a namespace-scoped install (`--watch-namespaces`), which then
//!   gets no ClusterConnection rights at all.
//! * For an install without Helm ([`bindings`]), the ServiceAccount and the bindings of every
//!   role to it, with the names the chart gives a release named `temporal-worker-controller`.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Name of the generated roles.
pub const NAME: &str = "temporal-worker-controller";
/// Name of the ClusterRole with the cluster-scoped rules of a cluster-wide install.
pub const CLUSTER_SCOPED_NAME: &str = "temporal-worker-controller-cluster-scoped";
/// Name of the ClusterRole with the few cluster-scoped rules of a namespace-scoped install:
/// another name than [`CLUSTER_SCOPED_NAME`], so applying one mode's RBAC after the other's
/// never strips the ClusterConnection rules of a cluster-wide install.
pub const NAMESPACE_SCOPED_NAME: &str = "temporal-worker-controller-namespace-scoped";

/// The finalizer the controller puts on its own Role and RoleBinding in a watched namespace
/// while WorkerDeployments there carry theirs: a deleted namespace takes them in no set order,
/// and without them the controller could not finish the cleanup that lets the namespace go.
pub const RIGHTS_FINALIZER: &str = "temporal.io/worker-deployment-cleanup";

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// Rules on namespaced kinds.
pub fn namespaced_rules() -> Vec<PolicyRule> {
    vec![
        // Watched through caches; patched for the finalizer (a WorkerResourceTemplate for its
        // owner reference); status by server-side apply.
        rule(
            "temporal.io",
            &[
                "workerdeployments",
                "connections",
                "workerresourcetemplates",
            ],
            &["list", "watch", "patch"],
        ),
        rule(
            "temporal.io",
            &[
                "workerdeployments/status",
                "connections/status",
                "workerresourcetemplates/status",
            ],
            &["patch"],
        ),
        // Owner references with blockOwnerDeletion on the owned Deployments, the templates
        // (owned by their WorkerDeployment) and the templates' rendered copies.
        rule(
            "temporal.io",
            &[
                "workerdeployments/finalizers",
                "connections/finalizers",
                "workerresourcetemplates/finalizers",
            ],
            &["update"],
        ),
        // The kinds a WorkerResourceTemplate renders by default (`--wrt-allowed-kinds`):
        // server-side apply (which creates) and delete. Grant more kinds to allow more.
        rule(
            "autoscaling",
            &["horizontalpodautoscalers"],
            &["create", "patch", "delete"],
        ),
        rule(
            "policy",
            &["poddisruptionbudgets"],
            &["create", "patch", "delete"],
        ),
        // Versioned Deployments: server-side apply (which creates), scale, delete.
        rule(
            "apps",
            &["deployments"],
            &["list", "watch", "create", "patch", "delete"],
        ),
        rule("apps", &["deployments/scale"], &["patch"]),
        // Credential Secrets: metadata watched, read on a client-pool miss (and a gate's
        // input from a Secret, read when the gate starts).
        rule("", &["secrets"], &["get", "list", "watch"]),
        // A gate's input from a ConfigMap, read when the gate starts.
        rule("", &["configmaps"], &["get"]),
        // The pods of versioned Deployments, watched to say why a target is not ready (CrashLoopBackOff,
        // ErrImagePull, ...) and to fail a crash-looping build early. Without it the rollout
        // works the same, only the progress deadline says less.
        rule("", &["pods"], &["list", "watch"]),
        // Events for people.
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

/// Rules on cluster-scoped kinds, for a cluster-wide install.
pub fn cluster_scoped_rules() -> Vec<PolicyRule> {
    let mut rules = vec![
        rule(
            "temporal.io",
            &["clusterconnections"],
            &["list", "watch", "patch"],
        ),
        rule("temporal.io", &["clusterconnections/status"], &["patch"]),
        rule(
            "temporal.io",
            &["clusterconnections/finalizers"],
            &["update"],
        ),
        // The labels a ClusterConnection's `allowedNamespaces` selector matches (read only).
        rule("", &["namespaces"], &["get", "list", "watch"]),
    ];
    rules.extend(always_cluster_rules());
    rules
}

/// Cluster-scoped rules every install needs, including a namespace-scoped one.
pub fn always_cluster_rules() -> Vec<PolicyRule> {
    vec![
        // The startup check of what the controller may do.
        rule(
            "authorization.k8s.io",
            &["selfsubjectaccessreviews"],
            &["create"],
        ),
        // Authenticated metrics (`--metrics-auth`): who a caller's token belongs to, and
        // whether that user may get /metrics.
        rule("authentication.k8s.io", &["tokenreviews"], &["create"]),
        rule(
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
        ),
        // The identity ends in the UID of the controller's own namespace, as TWC's does (the
        // namespace is only known at run time, so the rule cannot name it).
        rule("", &["namespaces"], &["get"]),
    ]
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(
            [("app.kubernetes.io/name".to_string(), NAME.to_string())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    }
}

/// Cluster-wide install: (namespaced kinds everywhere, cluster-scoped kinds).
pub fn cluster_wide() -> (ClusterRole, ClusterRole) {
    (
        ClusterRole {
            metadata: meta(NAME),
            rules: Some(namespaced_rules()),
            ..Default::default()
        },
        ClusterRole {
            metadata: meta(CLUSTER_SCOPED_NAME),
            rules: Some(cluster_scoped_rules()),
            ..Default::default()
        },
    )
}

/// Name of the Role for the leader-election Lease.
pub const LEADER_ELECTION_NAME: &str = "temporal-worker-controller-leader-election";

/// The Role to create in the controller's own namespace when leader election is on
/// (`--leader-elect`): the Lease it campaigns for, and nothing else.
pub fn leader_election(namespace: Option<&str>) -> Role {
    let mut metadata = meta(LEADER_ELECTION_NAME);
    metadata.namespace = namespace.map(str::to_string);
    Role {
        metadata,
        rules: Some(vec![rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "create", "update"],
        )]),
    }
}

/// Cluster-scoped rules of a namespace-scoped install only: the controller's own Role and
/// RoleBinding in a watched namespace ([`NAME`], renamed by the chart), held with
/// [`RIGHTS_FINALIZER`] while WorkerDeployments there need them. In the ClusterRole, so the
/// last of the two is let go even once the other is gone (a deleted namespace takes both).
pub fn own_rights_rules(name: &str) -> Vec<PolicyRule> {
    vec![PolicyRule {
        resource_names: Some(vec![name.to_string()]),
        ..rule(
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            &["get", "patch"],
        )
    }]
}

/// Namespace-scoped install: a Role to create in each watched namespace, and the
/// ClusterRole with what every install needs (no ClusterConnection rights) and the rights on
/// that Role and its binding.
pub fn namespace_scoped(namespace: Option<&str>) -> (Role, ClusterRole) {
    let mut role_meta = meta(NAME);
    role_meta.namespace = namespace.map(str::to_string);
    (
        Role {
            metadata: role_meta,
            rules: Some(namespaced_rules()),
        },
        ClusterRole {
            metadata: meta(NAMESPACE_SCOPED_NAME),
            rules: Some([always_cluster_rules(), own_rights_rules(NAME)].concat()),
            ..Default::default()
        },
    )
}

/// The ServiceAccount `namespace/name` the controller runs as.
pub fn service_account(name: &str, namespace: &str) -> ServiceAccount {
    let mut metadata = meta(name);
    metadata.namespace = Some(namespace.into());
    ServiceAccount {
        metadata,
        ..Default::default()
    }
}

fn subject(service_account: &str, namespace: &str) -> Vec<Subject> {
    vec![Subject {
        kind: "ServiceAccount".into(),
        name: service_account.into(),
        namespace: Some(namespace.into()),
        ..Default::default()
    }]
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

/// Binds ClusterRole `role` to ServiceAccount `namespace/service_account`; the binding has the
/// role's name, as in the chart.
pub fn cluster_role_binding(
    role: &str,
    service_account: &str,
    namespace: &str,
) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(role),
        role_ref: role_ref("ClusterRole", role),
        subjects: Some(subject(service_account, namespace)),
    }
}

/// Binds Role `role_namespace/role` to ServiceAccount `namespace/service_account`; the binding
/// has the role's name, as in the chart.
pub fn role_binding(
    role: &str,
    role_namespace: &str,
    service_account: &str,
    namespace: &str,
) -> RoleBinding {
    let mut metadata = meta(role);
    metadata.namespace = Some(role_namespace.into());
    RoleBinding {
        metadata,
        role_ref: role_ref("Role", role),
        subjects: Some(subject(service_account, namespace)),
    }
}

/// What an install without Helm applies besides the CRDs and the controller's Deployment.
pub struct Install {
    pub service_account: ServiceAccount,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// The Roles of a namespace-scoped install (one per watched namespace) and the
    /// leader-election Role in the controller's namespace.
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
}

/// The ServiceAccount `namespace/service_account` and every role the controller needs, bound to
/// it: cluster-wide (`watch_namespaces` empty) or a Role in each of `watch_namespaces`; the
/// leader-election Role in `namespace`, where the Lease is by default.
pub fn bindings(service_account: &str, namespace: &str, watch_namespaces: &[String]) -> Install {
    let mut cluster_roles = Vec::new();
    let mut roles = Vec::new();
    if watch_namespaces.is_empty() {
        let (namespaced, cluster) = cluster_wide();
        cluster_roles.extend([namespaced, cluster]);
    } else {
        for ns in watch_namespaces {
            let (role, cluster) = namespace_scoped(Some(ns));
            roles.push(role);
            if cluster_roles.is_empty() {
                cluster_roles.push(cluster);
            }
        }
    }
    roles.push(leader_election(Some(namespace)));
    let name = |m: &ObjectMeta| m.name.clone().unwrap_or_default();
    let cluster_role_bindings = cluster_roles
        .iter()
        .map(|r| cluster_role_binding(&name(&r.metadata), service_account, namespace))
        .collect();
    let role_bindings = roles
        .iter()
        .map(|r| {
            let role_ns = r.metadata.namespace.clone().unwrap_or_default();
            role_binding(&name(&r.metadata), &role_ns, service_account, namespace)
        })
        .collect();
    Install {
        service_account: self::service_account(service_account, namespace),
        cluster_roles,
        cluster_role_bindings,
        roles,
        role_bindings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(rules: &[PolicyRule]) -> Vec<String> {
        rules
            .iter()
            .flat_map(|r| r.resources.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn the_two_modes_never_write_the_same_cluster_role() {
        let (_, cluster) = cluster_wide();
        let (_, namespaced) = namespace_scoped(Some("a"));
        assert_ne!(cluster.metadata.name, namespaced.metadata.name);
    }

    #[test]
    fn cluster_scoped_kinds_are_never_in_a_role() {
        let (role, _) = namespace_scoped(Some("a"));
        let in_role = resources(role.rules.as_deref().unwrap_or_default());
        for cluster_kind in [
            "clusterconnections",
            "clusterconnections/finalizers",
            "namespaces",
            "selfsubjectaccessreviews",
            "subjectaccessreviews",
            "tokenreviews",
        ] {
            assert!(
                !in_role.iter().any(|r| r == cluster_kind),
                "{cluster_kind} in a Role"
            );
        }
        let (_, cluster) = cluster_wide();
        let in_cluster = resources(cluster.rules.as_deref().unwrap_or_default());
        assert!(
            in_cluster
                .iter()
                .any(|r| r == "clusterconnections/finalizers")
        );
    }

    #[test]
    fn every_role_is_bound_to_the_service_account() {
        for watch in [vec![], vec!["a".to_string(), "b".to_string()]] {
            let i = bindings("sa", "sys", &watch);
            assert_eq!(i.service_account.metadata.namespace.as_deref(), Some("sys"));
            assert_eq!(i.cluster_roles.len(), if watch.is_empty() { 2 } else { 1 });
            assert_eq!(i.roles.len(), watch.len() + 1, "and the leader election's");
            for (role, binding) in i.cluster_roles.iter().zip(&i.cluster_role_bindings) {
                assert_eq!(
                    role.metadata.name.as_deref(),
                    Some(binding.role_ref.name.as_str())
                );
            }
            for (role, binding) in i.roles.iter().zip(&i.role_bindings) {
                assert_eq!(
                    role.metadata.name.as_deref(),
                    Some(binding.role_ref.name.as_str())
                );
                assert_eq!(role.metadata.namespace, binding.metadata.namespace);
            }
            for subjects in i
                .cluster_role_bindings
                .iter()
                .map(|b| &b.subjects)
                .chain(i.role_bindings.iter().map(|b| &b.subjects))
            {
                let s = subjects.as_deref().unwrap_or_default();
                assert_eq!(s.len(), 1);
                assert_eq!(
                    (s[0].name.as_str(), s[0].namespace.as_deref()),
                    ("sa", Some("sys"))
                );
            }
            let leader = i
                .roles
                .last()
                .map(|r| (r.metadata.name.clone(), r.metadata.namespace.clone()));
            assert_eq!(
                leader,
                Some((
                    Some(LEADER_ELECTION_NAME.to_string()),
                    Some("sys".to_string())
                ))
            );
        }
    }

    #[test]
    fn no_wildcards() {
        let (a, b) = cluster_wide();
        for r in a
            .rules
            .unwrap_or_default()
            .iter()
            .chain(b.rules.unwrap_or_default().iter())
        {
            assert!(!r.verbs.iter().any(|v| v == "*"));
            assert!(
                !r.resources
                    .clone()
                    .unwrap_or_default()
                    .iter()
                    .any(|v| v == "*")
            );
        }
    }
}
