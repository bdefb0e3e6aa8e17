//! The environment itself, against the real servers: CEL validation, RBAC, garbage collection,
//! the pod runner driving real Deployments, and the Temporal dev server.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;
use temporalio_client::tonic;
use temporalio_common::protos::temporal::api::workflowservice::v1::DescribeWorkerDeploymentRequest;
use twc_testenv::{LocalImage, TestEnv, shared, wait_for};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn env() -> Result<(&'static TestEnv, Client), twc_testenv::Error> {
    let env = shared().await?;
    let client = env.client().await?;
    Ok((env, client))
}

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("test fixture does not parse: {e}"))
}

#[tokio::test]
async fn cel_rules_on_a_crd_are_enforced() -> TestResult {
    let (_env, client) = env().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = from_json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.celcheck.testenv.local"},
        "spec": {
            "group": "celcheck.testenv.local",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                        "x-kubernetes-validations": [
                            {"rule": "self.min <= self.max", "message": "min must not exceed max"}
                        ]
                    }}
                }}
            }]
        }
    }));
    twc_testenv::crds::install(&client, std::slice::from_ref(&crd)).await?;
    let stored = crds.get("widgets.celcheck.testenv.local").await?;
    // The apiserver kept the rule (an old apiserver silently drops it).
    let schema = serde_json::to_value(&stored.spec.versions[0].schema)?;
    assert!(
        schema.to_string().contains("self.min <= self.max"),
        "stored schema lost the CEL rule: {schema}"
    );

    let ns = _env.namespace("cel").await?;
    let gvk = GroupVersionKind::gvk("celcheck.testenv.local", "v1", "Widget");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let widget = |name: &str, min: i64, max: i64| -> DynamicObject {
        from_json(json!({
            "apiVersion": "celcheck.testenv.local/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"min": min, "max": max}
        }))
    };
    // Right after Established the discovery cache may lag for a moment.
    wait_for(
        "a valid Widget to be accepted",
        Duration::from_secs(20),
        || {
            let api = api.clone();
            let w = widget("good", 1, 2);
            async move {
                api.create(&PostParams::default(), &w)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        },
    )
    .await?;
    match api
        .create(&PostParams::default(), &widget("bad", 3, 2))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains("min must not exceed max"),
                "{}",
                s.message
            );
        }
        other => panic!("an invalid Widget was not rejected: {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn rbac_is_enforced_for_service_accounts() -> TestResult {
    let (env, client) = env().await?;
    let ns = env.namespace("rbac").await?;
    let sa_client = env
        .control_plane
        .client_as_service_account(&ns, "reader")
        .await?;
    let as_sa: Api<Deployment> = Api::namespaced(sa_client, &ns);
    match as_sa.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("a ServiceAccount with no binding listed Deployments: {other:?}"),
    }

    let role: Role = from_json(json!({
        "metadata": {"name": "deployment-reader"},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]
    }));
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": "reader-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployment-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]
    }));
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await?;
    wait_for("the Role to take effect", Duration::from_secs(10), || {
        let api = as_sa.clone();
        async move {
            api.list(&ListParams::default())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await?;
    // The Role allows list only, in this namespace only.
    let other_ns: Api<Deployment> = Api::namespaced(as_sa.into_client(), "default");
    assert!(other_ns.list(&ListParams::default()).await.is_err());
    Ok(())
}

#[tokio::test]
async fn garbage_collector_deletes_dependents() -> TestResult {
    let (env, client) = env().await?;
    let ns = env.namespace("gc").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "owner"}})),
        )
        .await?;
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    cms.create(
        &PostParams::default(),
        &from_json(
            json!({"metadata": {"name": "dependent", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
            ]}}),
        ),
    )
    .await?;
    cms.delete("owner", &DeleteParams::background()).await?;
    wait_for(
        "the garbage collector to delete the dependent",
        Duration::from_secs(30),
        || {
            let cms = cms.clone();
            async move {
                match cms.get_opt("dependent").await {
                    Ok(None) => Ok(()),
                    Ok(Some(cm)) => Err(format!("still there: {:?}", cm.metadata)),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn pod_runner_runs_a_deployment_and_stops_it_on_scale_down() -> TestResult {
    let (env, client) = env().await?;
    let ns = env.namespace("pods").await?;
    env.pod_runner.register_image(
        "testenv/sleeper",
        LocalImage::new("/bin/sh").args(["-c", "exec sleep 3600"]),
    );
    let secret: Secret = from_json(json!({
        "metadata": {"name": "creds"},
        "stringData": {"token": "s3cr3t", "tls.crt": "CERTDATA"}
    }));
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": "sleeper"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sleeper"}},
            "template": {
                "metadata": {"labels": {"app": "sleeper"}},
                "spec": {
                    "containers": [{
                        "name": "main",
                        "image": "testenv/sleeper:v1",
                        "command": ["sh", "-c",
                            "echo \"token=$TOKEN cert=$(cat $CERT_PATH) pod=$POD\"; exec sleep 3600"],
                        "env": [
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                            {"name": "CERT_PATH", "value": "/etc/creds/tls.crt"},
                            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                        ],
                        "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]
                    }],
                    "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}]
                }
            }
        }
    }));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    wait_for(
        "the Deployment to be Available with 2 ready replicas",
        Duration::from_secs(60),
        || {
            let d = deployments.clone();
            async move {
                let dep = d.get("sleeper").await.map_err(|e| e.to_string())?;
                let status = dep.status.unwrap_or_default();
                let available = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Available" && c.status == "True");
                let ready = status.ready_replicas.unwrap_or(0);
                if available && ready == 2 {
                    Ok(())
                } else {
                    Err(format!("available={available} readyReplicas={ready}"))
                }
            }
        },
    )
    .await?;
    let pids = env.pod_runner.running_pids(&ns);
    assert_eq!(pids.len(), 2, "expected two processes, got {pids:?}");

    // The container saw its Secret through env and through the mounted volume.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await?;
    for pod in &pods.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let log = env.pod_runner.container_log(&ns, &name, "main");
        let text = wait_for(
            "the container to print its env",
            Duration::from_secs(10),
            || {
                let log = log.clone();
                async move {
                    let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
                    if text.contains("token=") {
                        Ok(text)
                    } else {
                        Err(text)
                    }
                }
            },
        )
        .await?;
        assert!(
            text.contains(&format!("token=s3cr3t cert=CERTDATA pod={name}")),
            "container output: {text}"
        );
    }

    deployments
        .patch(
            "sleeper",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    wait_for("both processes to stop", Duration::from_secs(30), || {
        let pids = pids.clone();
        async move {
            let alive: Vec<u32> = pids
                .iter()
                .copied()
                .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
                .collect();
            if alive.is_empty() {
                Ok(())
            } else {
                Err(format!("alive: {alive:?}"))
            }
        }
    })
    .await?;
    wait_for("the pods to be gone", Duration::from_secs(30), || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, &ns)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            if pods.items.is_empty() {
                Ok(())
            } else {
                Err(format!("{} pods left", pods.items.len()))
            }
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn pod_runner_reports_a_missing_secret_and_recovers() -> TestResult {
    let (env, client) = env().await?;
    let ns = env.namespace("pods-missing").await?;
    env.pod_runner.register_image(
        "testenv/sleeper",
        LocalImage::new("/bin/sh").args(["-c", "exec sleep 3600"]),
    );
    let pod: k8s_openapi::api::core::v1::Pod = from_json(json!({
        "metadata": {"name": "needs-secret"},
        "spec": {"containers": [{
            "name": "main", "image": "testenv/sleeper",
            "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
        }]}
    }));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod).await?;
    let waiting = |want: &'static str| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                let p = pods.get("needs-secret").await.map_err(|e| e.to_string())?;
                let cs = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|c| c.into_iter().next());
                let reason = cs
                    .as_ref()
                    .and_then(|c| c.state.as_ref())
                    .map(|s| {
                        s.waiting
                            .as_ref()
                            .and_then(|w| w.reason.clone())
                            .unwrap_or_else(|| {
                                if s.running.is_some() {
                                    "Running".into()
                                } else {
                                    "other".into()
                                }
                            })
                    })
                    .unwrap_or_default();
                if reason == want {
                    Ok(())
                } else {
                    Err(format!("state: {reason}"))
                }
            }
        }
    };
    wait_for(
        "CreateContainerConfigError for the missing Secret",
        Duration::from_secs(20),
        waiting("CreateContainerConfigError"),
    )
    .await?;
    let secret: Secret =
        from_json(json!({"metadata": {"name": "later"}, "stringData": {"token": "t"}}));
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;
    wait_for(
        "the pod to run once the Secret exists",
        Duration::from_secs(20),
        waiting("Running"),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn temporal_dev_server_answers_worker_deployment_rpcs() -> TestResult {
    let env = shared().await?;
    let namespace = env.temporal_namespace().await?;
    let conn = env.temporal.connect().await?;
    let mut svc = conn.workflow_service();
    let result = svc
        .describe_worker_deployment(tonic::Request::new(DescribeWorkerDeploymentRequest {
            namespace: namespace.clone(),
            deployment_name: "no-such-deployment".into(),
        }))
        .await;
    match result {
        Err(status) => assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}"),
        Ok(resp) => panic!("an unknown deployment was described: {resp:?}"),
    }
    // Two tests never share a Temporal namespace.
    let other = env.temporal_namespace().await?;
    assert_ne!(namespace, other);
    Ok(())
}

/// The fault-injecting proxy the chaos run puts in front of the apiserver: at rest it passes
/// everything (a watch included); a 409 is a write refused (nothing stored), a 500 a write
/// served whose answer was lost (stored).
#[tokio::test]
async fn apiserver_proxy_injects_conflicts_and_lost_answers() -> TestResult {
    use futures::StreamExt as _;
    use twc_testenv::api_proxy::{ApiProxy, Faults};
    let (env, admin) = env().await?;
    let cp = &env.control_plane;
    let proxy = ApiProxy::start(&cp.server_url, &cp.ca_pem).await?;
    let kubeconfig = tempfile::NamedTempFile::new()?;
    proxy.write_kubeconfig(cp.kubeconfig(), kubeconfig.path())?;
    let config: kube::config::Kubeconfig =
        serde_json::from_str(&std::fs::read_to_string(kubeconfig.path())?)?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await?;
    let client = Client::try_from(config)?;
    let ns = env.namespace("proxy").await?;
    let via: Api<ConfigMap> = Api::namespaced(client, &ns);
    let direct: Api<ConfigMap> = Api::namespaced(admin, &ns);
    let cm = |name: &str| -> ConfigMap { from_json(json!({"metadata": {"name": name}})) };

    // At rest: a write and a watch pass through.
    let mut watch = std::pin::pin!(kube::runtime::watcher(
        via.clone(),
        kube::runtime::watcher::Config::default()
    ));
    via.create(&PostParams::default(), &cm("through")).await?;
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = watch.next().await {
            if let Ok(
                kube::runtime::watcher::Event::Apply(c)
                | kube::runtime::watcher::Event::InitApply(c),
            ) = event
                && c.metadata.name.as_deref() == Some("through")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        seen,
        Ok(true),
        "the watch through the proxy saw the ConfigMap"
    );

    proxy.set_faults(Faults {
        conflict_every: 1,
        error_every: 0,
    });
    let refused = via.create(&PostParams::default(), &cm("refused")).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 409),
        "a 409: {refused:?}"
    );
    assert!(
        direct.get_opt("refused").await?.is_none(),
        "a 409 stores nothing"
    );

    proxy.set_faults(Faults {
        conflict_every: 0,
        error_every: 1,
    });
    let lost = via.create(&PostParams::default(), &cm("lost")).await;
    assert!(
        matches!(&lost, Err(kube::Error::Api(s)) if s.code == 500),
        "a 500: {lost:?}"
    );
    assert!(
        direct.get_opt("lost").await?.is_some(),
        "a 500 here was served"
    );

    proxy.set_faults(Faults::default());
    via.create(&PostParams::default(), &cm("after")).await?;
    let (requests, conflicts, errors) = proxy.counts();
    assert!(requests >= 4, "{requests} requests");
    assert_eq!((conflicts, errors), (1, 1));
    Ok(())
}
