//! Coming from TWC's chart (docs/helm.md): each of TWC's keys renders what ours do.

use serde_json::{Value, json};

use crate::render::{CHART, env, env_value, helm, helm_template, of_kind, one, pod_spec, rules};

/// A check of one rendering (release `t` in namespace `t-system`).
type Check = fn(&[Value]);

const T: &str = "t-temporal-worker-controller";

#[tokio::test]
async fn twc_keys_render_what_ours_do() {
    let cases: &[(&str, &[&str], Check)] = &[
        (
            "image.pullSecrets joins imagePullSecrets",
            &[
                "--set",
                "image.pullSecrets[0].name=twc",
                "--set",
                "imagePullSecrets[0].name=ours",
                "--set",
                "image.pullSecrets[1].name=ours",
            ],
            |d| {
                assert_eq!(
                    pod_spec(d, T)["imagePullSecrets"],
                    json!([{"name": "ours"}, {"name": "twc"}])
                )
            },
        ),
        (
            "containerSecurityContext replaces securityContext",
            &[
                "--set",
                "containerSecurityContext.runAsUser=1000",
                "--set",
                "containerSecurityContext.allowPrivilegeEscalation=false",
            ],
            |d| {
                assert_eq!(
                    pod_spec(d, T)["containers"][0]["securityContext"],
                    json!({"runAsUser": 1000, "allowPrivilegeEscalation": false})
                )
            },
        ),
        (
            "securityContext.seccompProfile.enabled is dropped",
            &["--set", "securityContext.seccompProfile.enabled=true"],
            |d| {
                assert_eq!(
                    pod_spec(d, T)["containers"][0]["securityContext"]["seccompProfile"],
                    json!({"type": "RuntimeDefault"})
                )
            },
        ),
        (
            "rbac.restrictWatchNamespaces is namespaced scope",
            &["--set", "rbac.restrictWatchNamespaces={a,b,a}"],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(env_value(c, "WATCH_NAMESPACES").as_deref(), Some("a,b"));
                let roles: Vec<&Value> = of_kind(d, "Role")
                    .filter(|r| r["metadata"]["name"] == T)
                    .collect();
                assert_eq!(
                    roles
                        .iter()
                        .map(|r| r["metadata"]["namespace"].clone())
                        .collect::<Vec<_>>(),
                    [json!("a"), json!("b")]
                );
                assert!(
                    of_kind(d, "ClusterRole").all(|r| r["metadata"]["name"] != T),
                    "no cluster-wide role"
                );
                one(d, "ClusterRole", &format!("{T}-cluster-scoped"));
            },
        ),
        (
            "rbac.restrictWatchNamespaces equal to watchNamespaces",
            &[
                "--set",
                "rbac.restrictWatchNamespaces={b,a}",
                "--set",
                "watchNamespaces={a,b}",
            ],
            |d| {
                assert_eq!(
                    env_value(&pod_spec(d, T)["containers"][0], "WATCH_NAMESPACES").as_deref(),
                    Some("b,a")
                )
            },
        ),
        (
            "workerResourceTemplate.allowedResources: kinds and a ClusterRole",
            &[
                "--set-json",
                r#"workerResourceTemplate.allowedResources=[{"kinds":["ScaledObject"],"apiGroups":["keda.sh"],"resources":["scaledobjects"]},{"kinds":["HorizontalPodAutoscaler","ScaledObject"],"apiGroups":["autoscaling"],"resources":["horizontalpodautoscalers"]}]"#,
            ],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(
                    env_value(c, "WRT_ALLOWED_KINDS").as_deref(),
                    Some("ScaledObject,HorizontalPodAutoscaler")
                );
                let name = format!("{T}-wrt-kinds");
                assert_eq!(
                    rules(one(d, "ClusterRole", &name)),
                    json!([
                        {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["create", "patch", "delete"]},
                        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["create", "patch", "delete"]},
                    ])
                );
                let binding = one(d, "ClusterRoleBinding", &name);
                assert_eq!(binding["subjects"][0]["name"], T);
                assert_eq!(binding["roleRef"]["name"], name.as_str());
            },
        ),
        (
            "workerResourceTemplate.allowedResources, namespaced: a Role per namespace",
            &[
                "--set-json",
                r#"workerResourceTemplate.allowedResources=[{"kinds":["ScaledObject"],"apiGroups":["keda.sh"],"resources":["scaledobjects"]}]"#,
                "--set",
                "rbac.restrictWatchNamespaces={a,b}",
            ],
            |d| {
                let name = format!("{T}-wrt-kinds");
                assert!(of_kind(d, "ClusterRole").all(|r| r["metadata"]["name"] != name.as_str()));
                for kind in ["Role", "RoleBinding"] {
                    let ns: Vec<Value> = of_kind(d, kind)
                        .filter(|r| r["metadata"]["name"] == name.as_str())
                        .map(|r| r["metadata"]["namespace"].clone())
                        .collect();
                    assert_eq!(ns, [json!("a"), json!("b")], "{kind}");
                }
            },
        ),
        (
            "no allowedResources: the binary's default kinds, no extra role",
            &[],
            |d| {
                assert_eq!(
                    env_value(&pod_spec(d, T)["containers"][0], "WRT_ALLOWED_KINDS"),
                    None
                );
                assert!(d.iter().all(|o| {
                    !o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .ends_with("-wrt-kinds")
                }));
            },
        ),
        (
            "metrics.enabled=false: no port, Service or ServiceMonitor; loopback only",
            &[
                "--set",
                "metrics.enabled=false",
                "--set",
                "metrics.serviceMonitor.enabled=true",
            ],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(
                    env_value(c, "METRICS_BIND_ADDRESS").as_deref(),
                    Some("127.0.0.1:8080")
                );
                assert_eq!(
                    c["ports"],
                    json!([{"name": "health", "containerPort": 8081, "protocol": "TCP"}])
                );
                assert_eq!(of_kind(d, "Service").count(), 0);
                assert_eq!(of_kind(d, "ServiceMonitor").count(), 0);
            },
        ),
        (
            "metrics.enabled (TWC's default) with a ServiceMonitor",
            &[
                "--set",
                "metrics.enabled=true",
                "--set",
                "metrics.disableAuth=true",
                "--set",
                "metrics.serviceMonitor.enabled=true",
            ],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(
                    env_value(c, "METRICS_BIND_ADDRESS").as_deref(),
                    Some("0.0.0.0:8080")
                );
                assert_eq!(env_value(c, "METRICS_AUTH"), None, "disableAuth=true");
                one(d, "Service", &format!("{T}-metrics"));
                let monitor = one(d, "ServiceMonitor", T);
                assert!(
                    monitor["spec"]["endpoints"][0]
                        .get("bearerTokenFile")
                        .is_none()
                );
                assert_eq!(
                    of_kind(d, "ClusterRole")
                        .filter(|r| r["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.ends_with("-metrics-reader")))
                        .count(),
                    0
                );
            },
        ),
        (
            "metrics.disableAuth=false (TWC's default): authenticated, a metrics-reader role",
            &["--set", "metrics.serviceMonitor.enabled=true"],
            |d| {
                let c = &pod_spec(d, T)["containers"][0];
                assert_eq!(env_value(c, "METRICS_AUTH").as_deref(), Some("true"));
                let monitor = one(d, "ServiceMonitor", T);
                assert_eq!(
                    monitor["spec"]["endpoints"][0]["bearerTokenFile"],
                    json!("/var/run/secrets/kubernetes.io/serviceaccount/token")
                );
                let reader = one(d, "ClusterRole", &format!("{T}-metrics-reader"));
                assert_eq!(
                    reader["rules"],
                    json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
                );
            },
        ),
        ("priority", &["--set", "priority=1000"], |d| {
            assert_eq!(pod_spec(d, T)["priority"], 1000)
        }),
        (
            "extraVolumes and extraVolumeMounts",
            &[
                "--set",
                "extraVolumes[0].name=ca",
                "--set",
                "extraVolumes[0].secret.secretName=ca",
                "--set",
                "extraVolumeMounts[0].name=ca",
                "--set",
                "extraVolumeMounts[0].mountPath=/etc/ca",
            ],
            |d| {
                let pod = pod_spec(d, T);
                assert_eq!(
                    pod["volumes"],
                    json!([{"name": "ca", "secret": {"secretName": "ca"}}])
                );
                assert_eq!(
                    pod["containers"][0]["volumeMounts"],
                    json!([{"name": "ca", "mountPath": "/etc/ca"}])
                );
            },
        ),
        (
            "rbac.createEndUserRoles=false",
            &["--set", "rbac.createEndUserRoles=false"],
            |d| {
                assert!(of_kind(d, "ClusterRole").all(|r| {
                    let n = r["metadata"]["name"].as_str().unwrap_or_default();
                    !n.ends_with("-view") && !n.ends_with("-edit")
                }))
            },
        ),
        (
            "serviceAccount.name: null (TWC's default) is the full name",
            &[
                "--set",
                "serviceAccount.name=null",
                "--set",
                "rbac.create=true",
            ],
            |d| assert_eq!(pod_spec(d, T)["serviceAccountName"], T),
        ),
    ];
    let twc = twc_testenv::paths::workspace_binary("temporal-worker-controller", "twc")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = tokio::process::Command::new(&twc)
        .args(["run", "--help"])
        .output()
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", twc.display()));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    for (name, args, check) in cases {
        let docs = helm_template("t", CHART, "t-system", args).await;
        check(&docs);
        for (env, _) in env(&pod_spec(&docs, T)["containers"][0]) {
            assert!(
                env == "POD_NAMESPACE" || help.contains(&format!("[env: {env}=")),
                "{name}: the chart sets {env}, which `twc run` does not read"
            );
        }
        let mut lint = vec!["lint", "--strict", CHART];
        lint.extend_from_slice(args);
        let (ok, stdout, stderr) = helm(&lint).await;
        assert!(ok, "{name}: helm lint:\n{stdout}\n{stderr}");
    }

    for (args, message) in [
        (
            &[
                "--set",
                "rbac.restrictWatchNamespaces={a}",
                "--set",
                "watchNamespaces={b}",
            ][..],
            "rbac.restrictWatchNamespaces (a) and watchNamespaces (b) differ",
        ),
        (
            &["--set-json", "workerResourceTemplate.allowedResources=[]"][..],
            "workerResourceTemplate.allowedResources is empty",
        ),
    ] {
        let mut all = vec!["template", "t", CHART];
        all.extend_from_slice(args);
        let (ok, _, stderr) = helm(&all).await;
        assert!(!ok && stderr.contains(message), "{args:?}: {stderr}");
    }
}
