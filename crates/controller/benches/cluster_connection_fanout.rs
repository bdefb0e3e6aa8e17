//! Figures for the ClusterConnection fan-out: 200 WorkerDeployments across 50 namespaces share
//! one ClusterConnection; its spec changes; how long until every WorkerDeployment has been
//! re-reconciled (its versioned Deployment re-applied with the new connection), and how many
//! Kubernetes and Temporal calls that took. Real apiserver, real Temporal dev server.
//!
//!     cargo bench -p twc-controller --bench cluster_connection_fanout
//!
//! Sizes can be changed with TWC_BENCH_NAMESPACES and TWC_BENCH_PER_NAMESPACE.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use twc_api::{ClusterConnection, WorkerDeployment};
use twc_controller::config::Intervals;
use twc_controller::controller::{Config, prepare};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn temporal_counts(metrics_address: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(mut stream) = tokio::net::TcpStream::connect(metrics_address).await else {
        return out;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await;
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    for line in text.lines().filter(|l| l.starts_with("service_requests{")) {
        if !line.contains("service_name=\"frontend\"") {
            continue;
        }
        let op = line
            .split("operation=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("")
            .to_string();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *out.entry(op).or_default() += value;
    }
    out
}

/// Counts the controller's own Kubernetes requests by method and resource.
#[derive(Clone, Default)]
struct Counter(std::sync::Arc<std::sync::Mutex<BTreeMap<String, f64>>>);

impl Counter {
    fn snapshot(&self) -> BTreeMap<String, f64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

fn resource_of(path: &str) -> String {
    // /apis/<group>/<version>[/namespaces/<ns>]/<resource>[/<name>[/<sub>]] or /api/v1/...
    let parts: Vec<&str> = path
        .split('?')
        .next()
        .unwrap_or("")
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let rest: &[&str] = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        _ => parts.get(3..).unwrap_or_default(),
    };
    let rest = if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        &rest[2..]
    } else {
        rest
    };
    match rest {
        [r] => r.to_string(),
        [r, _] => r.to_string(),
        [r, _, sub, ..] => format!("{r}/{sub}"),
        _ => path.to_string(),
    }
}

async fn counting_client(config: kube::Config, counter: Counter) -> anyhow::Result<Client> {
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let method = if watch {
            "WATCH".to_string()
        } else {
            req.method().to_string()
        };
        let key = format!("{method} {}", resource_of(req.uri().path()));
        if let Ok(mut m) = counter.0.lock() {
            *m.entry(key).or_default() += 1.0;
        }
        req
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

fn diff(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

fn main() -> anyhow::Result<()> {
    let namespaces = env_usize("TWC_BENCH_NAMESPACES", 50);
    let per_namespace = env_usize("TWC_BENCH_PER_NAMESPACE", 4);
    let total = namespaces * per_namespace;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let dir = tempfile::tempdir()?;
        let env = twc_testenv::TestEnv::start(&Default::default(), dir.path()).await?;
        let client = env.client().await?;
        twc_testenv::crds::install(&client, &twc_api::crd::all()).await?;
        let counter = Counter::default();
        let kubeconfig: kube::config::Kubeconfig = serde_json::from_value(env.control_plane.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        let controller_client = counting_client(config, counter.clone()).await?;
        let (_, controller) = prepare(
            controller_client,
            Config {
                identity: "twc-bench".into(),
                intervals: Intervals { moving: Duration::from_secs(2), steady: Duration::from_secs(600), ..Default::default() },
                ..Default::default()
            },
        )
        .await;
        tokio::spawn(controller);

        let port = env.temporal.address.rsplit(':').next().unwrap_or_default().to_string();
        let cc: ClusterConnection = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "ClusterConnection",
            "metadata": {"name": "shared"},
            "spec": {"hostPort": format!("127.0.0.1:{port}")}
        }))?;
        Api::<ClusterConnection>::all(client.clone()).create(&PostParams::default(), &cc).await?;

        println!("creating {total} WorkerDeployments in {namespaces} namespaces...");
        let started = Instant::now();
        for n in 0..namespaces {
            let ns = env.namespace(&format!("bench{n}")).await?;
            let api: Api<WorkerDeployment> = Api::namespaced(client.clone(), &ns);
            for i in 0..per_namespace {
                let wd: WorkerDeployment = serde_json::from_value(json!({
                    "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
                    "metadata": {"name": format!("w{i}")},
                    "spec": {
                        "replicas": 0,
                        "workerOptions": {"connectionRef": {"objectRef": {"kind": "ClusterConnection", "name": "shared"}},
                                          "temporalNamespace": "default"},
                        "rollout": {"strategy": "AllAtOnce"},
                        "template": {"spec": {"containers": [{"name": "worker", "image": format!("bench/worker:v{i}")}]}}
                    }
                }))?;
                api.create(&PostParams::default(), &wd).await?;
            }
        }

        // Track every versioned Deployment's connection hash through one watch.
        let hash_key = twc_api::labels::CONNECTION_SPEC_HASH;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let deployments: Api<Deployment> = Api::all(client.clone());
        tokio::spawn(async move {
            let mut stream = watcher::watcher(deployments, watcher::Config::default().labels(twc_api::labels::DEPLOYMENT_NAME)).boxed();
            while let Some(Ok(ev)) = stream.next().await {
                if let Event::Apply(d) | Event::InitApply(d) = ev {
                    let hash = d.spec.as_ref().and_then(|s| s.template.metadata.as_ref())
                        .and_then(|m| m.annotations.as_ref()).and_then(|a| a.get(hash_key).cloned()).unwrap_or_default();
                    let _ = tx.send((format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()), hash, Instant::now()));
                }
            }
        });
        let mut hashes: HashMap<String, (String, Instant)> = HashMap::new();
        let wait_all = |hashes: &mut HashMap<String, (String, Instant)>, rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, String, Instant)>, want: Option<String>| {
            let mut done = false;
            while let Ok((k, h, t)) = rx.try_recv() {
                hashes.insert(k, (h, t));
            }
            if hashes.len() >= total && want.as_ref().is_none_or(|w| hashes.values().all(|(h, _)| h == w)) {
                done = true;
            }
            done
        };
        let deadline = Instant::now() + Duration::from_secs(600);
        while !wait_all(&mut hashes, &mut rx, None) {
            anyhow::ensure!(Instant::now() < deadline, "only {} of {total} Deployments appeared", hashes.len());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!("initial rollout: {total} versioned Deployments in {:.1}s", started.elapsed().as_secs_f64());
        // Let the initial wave settle.
        tokio::time::sleep(Duration::from_secs(5)).await;
        while rx.try_recv().is_ok() {}

        let k8s_before = counter.snapshot();
        let temporal_before = temporal_counts(&env.temporal.metrics_address).await;
        let changed_at = Instant::now();
        Api::<ClusterConnection>::all(client.clone())
            .patch("shared", &PatchParams::default(), &Patch::Merge(json!({"spec": {"hostPort": format!("localhost:{port}")}})))
            .await?;
        let new_hash = twc_controller::plan::deployment::connection_hash(&twc_api::ConnectionSpec {
            host_port: format!("localhost:{port}"),
            ..Default::default()
        });
        let deadline = Instant::now() + Duration::from_secs(600);
        while !wait_all(&mut hashes, &mut rx, Some(new_hash.clone())) {
            anyhow::ensure!(Instant::now() < deadline, "not all WorkerDeployments re-reconciled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let all_done = changed_at.elapsed();
        let mut latencies: Vec<Duration> = hashes.values().map(|(_, t)| t.saturating_duration_since(changed_at)).collect();
        latencies.sort();
        let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        tokio::time::sleep(Duration::from_secs(2)).await;
        let k8s = diff(&counter.snapshot(), &k8s_before);
        let temporal = diff(&temporal_counts(&env.temporal.metrics_address).await, &temporal_before);

        println!();
        println!("ClusterConnection spec change -> all {total} WorkerDeployments re-reconciled");
        println!("  all done after   {:>8.2}s", all_done.as_secs_f64());
        println!("  p50 per WD       {:>8.2}s", pct(0.5).as_secs_f64());
        println!("  p99 per WD       {:>8.2}s", pct(0.99).as_secs_f64());
        println!("Kubernetes API calls the controller made in that window:");
        let mut k8s_total = 0.0;
        for (k, v) in &k8s {
            println!("  {k:<40} {v:>6}");
            k8s_total += v;
        }
        println!("  {:<40} {k8s_total:>6}  ({:.2} per WorkerDeployment)", "total", k8s_total / total as f64);
        println!("Temporal RPCs in that window (frontend service_requests):");
        for (k, v) in &temporal {
            println!("  {k:<40} {v:>6}");
        }
        let lists: f64 = 0.0 + k8s.iter().filter(|(k, _)| k.starts_with("GET ") && !k.contains('/')).map(|(_, v)| v).sum::<f64>();
        println!("  (collection GETs, i.e. list calls, in the window: {lists})");
        Ok::<_, anyhow::Error>(())
    })
}
