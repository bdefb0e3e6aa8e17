//! `twc-local-env`: starts the local environment (etcd, kube-apiserver, kube-controller-manager,
//! Temporal dev server, pod runner) and keeps it running until Ctrl-C.
//!
//! `--exit-when-ready` starts it, prints what it would tell a user plus the memory of each
//! server, and stops it again (CI uses this to keep the README's first command honest).
//!
//! `--playground` (what `hack/playground.sh` runs) also installs the CRDs, runs the controller
//! (`twc run`) and the example worker image `example.com/hello-worker` (any tag), and writes a
//! ClusterConnection + WorkerDeployment to apply with kubectl and watch a real rollout. With
//! `--exit-when-ready` it applies them itself, waits for the rollout, and stops.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use twc_testenv::controller::Controller;
use twc_testenv::{LocalImage, Options, TestEnv, paths};

#[derive(Parser)]
#[command(
    name = "twc-local-env",
    about = "Run a local Kubernetes control plane and Temporal dev server"
)]
struct Cli {
    /// Directory for data, logs and the kubeconfig (wiped at start).
    #[arg(long, env = "TWC_LOCAL_ENV_DIR", default_value = "target/local-env")]
    dir: PathBuf,
    /// Start, check, print, and stop (non-interactive).
    #[arg(long)]
    exit_when_ready: bool,
    /// Also install the CRDs, run the controller and the example worker image, and write a
    /// sample ClusterConnection + WorkerDeployment to apply (`<dir>/playground.yaml`).
    #[arg(long)]
    playground: bool,
}

/// The image name the example worker runs under (any tag: v1, v2, ...).
const IMAGE: &str = "example.com/hello-worker";

/// The sample to apply: a ClusterConnection to the dev server and a WorkerDeployment using it.
fn playground_yaml(temporal_address: &str) -> String {
    format!(
        r#"# A ClusterConnection (once, for every namespace) and a WorkerDeployment using it.
apiVersion: v1
kind: Namespace
metadata: {{name: playground}}
---
apiVersion: temporal.io/v1alpha1
kind: ClusterConnection
metadata: {{name: local-temporal}}
spec:
  hostPort: {temporal_address}
---
apiVersion: temporal.io/v1alpha1
kind: WorkerDeployment
metadata: {{name: hello, namespace: playground}}
spec:
  replicas: 2
  workerOptions:
    connectionRef: {{objectRef: {{kind: ClusterConnection, name: local-temporal}}}}
    temporalNamespace: default
  rollout:
    strategy: Progressive
    steps: [{{rampPercentage: 25, pauseDuration: 30s}}, {{rampPercentage: 75, pauseDuration: 30s}}]
  sunset: {{scaledownDelay: 30s, deleteDelay: 1m}}
  template:
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{{name: worker, image: "{IMAGE}:v1"}}]
"#
    )
}

/// Installs the CRDs of `config/crd` (the workspace's generated ones).
async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/crd");
    let mut crds = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path)?;
            let crd: CustomResourceDefinition = serde_yaml::from_str(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            crds.push(crd);
        }
    }
    twc_testenv::crds::install(client, &crds).await?;
    Ok(())
}

/// `kubectl apply -f file` with the environment's kubeconfig; fails with kubectl's output.
fn kubectl(env: &TestEnv, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new(paths::kubectl())
        .args(args)
        .env("KUBECONFIG", &env.control_plane.kubeconfig_path)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        anyhow::bail!(
            "kubectl {}: {}{}",
            args.join(" "),
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(text)
}

/// Applies the playground and waits (3 minutes at most) until its WorkerDeployment says its
/// version is current.
async fn check_playground(env: &TestEnv, file: &std::path::Path) -> anyhow::Result<()> {
    let file = file.display().to_string();
    print!("{}", kubectl(env, &["apply", "-f", &file])?);
    let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].reason}";
    let started = std::time::Instant::now();
    loop {
        let reason = kubectl(
            env,
            &["-n", "playground", "get", "wd", "hello", "-o", ready],
        )?;
        if reason == "RolloutComplete" {
            print!("{}", kubectl(env, &["get", "wd", "-A"])?);
            print!("{}", kubectl(env, &["get", "clusterconnections"])?);
            println!("The playground's WorkerDeployment rolled out.");
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(180) {
            anyhow::bail!(
                "the playground's WorkerDeployment did not roll out in 3 minutes (Ready reason {reason:?})"
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let dir = twc_testenv::fresh_dir(&cli.dir)?;

    println!(
        "Starting etcd, kube-apiserver, kube-controller-manager and the Temporal dev server..."
    );
    let env = TestEnv::start(&Options::default(), &dir).await?;

    let client = env.client().await?;
    let mut controller = None;
    if cli.playground {
        install_crds(&client).await?;
        let worker = paths::workspace_binary("twc-example-worker", "twc-example-worker")?;
        env.pod_runner
            .register_image(IMAGE, LocalImage::new(worker));
        let mut c = Controller::start(&env.control_plane, &dir, "twc-playground")?;
        c.wait_ready().await?;
        controller = Some(c);
    }
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await?;
    let kubeconfig = env.control_plane.kubeconfig_path.display().to_string();
    println!();
    println!("Ready in {:.1}s.", env.startup.as_secs_f64());
    println!();
    println!("  Kubernetes  {}", env.control_plane.server_url);
    println!("              export KUBECONFIG={kubeconfig}");
    println!("              {} get nodes", paths::kubectl().display());
    println!(
        "              ({} node: {}; pods bound to it run as local processes)",
        nodes.items.len(),
        env.pod_runner.node_name()
    );
    println!("  Temporal    {}", env.temporal.address);
    println!(
        "              {} operator namespace list --address {}",
        paths::temporal().display(),
        env.temporal.address
    );
    println!("  Logs        {}", dir.display());
    let playground = dir.join("playground.yaml");
    if let Some(c) = &controller {
        std::fs::write(&playground, playground_yaml(&env.temporal.address))?;
        let kubectl = paths::kubectl().display().to_string();
        println!(
            "  Controller  twc run, ready (log: {})",
            c.process.log_path().display()
        );
        println!("  Image       {IMAGE}:<any tag> runs the example worker");
        println!();
        println!("Try it (in another shell, after the export above):");
        println!("  {kubectl} apply -f {}", playground.display());
        println!("  {kubectl} get wd -A -w          # v1 registers, then goes current");
        println!(
            "  {kubectl} -n playground patch wd hello --type=json -p '[{{\"op\":\"replace\",\"path\":\"/spec/template/spec/containers/0/image\",\"value\":\"{IMAGE}:v2\"}}]'"
        );
        println!("  {kubectl} get clusterconnections   # Users, Ready");
        println!("  {kubectl} -n playground get events --sort-by=.lastTimestamp");
    }
    println!();
    for (name, rss) in env.rss() {
        println!(
            "  RSS {name:<24} {:>6.1} MiB",
            rss as f64 / (1024.0 * 1024.0)
        );
    }

    if cli.exit_when_ready {
        // Let the servers settle, then check they are all still up.
        tokio::time::sleep(Duration::from_secs(1)).await;
        env.check_running()?;
        if let Some(c) = controller.as_mut() {
            check_playground(&env, &playground).await?;
            c.process.check_running()?;
        }
        println!("\nAll components are running; stopping (--exit-when-ready).");
        return Ok(());
    }
    println!("\nPress Ctrl-C to stop everything.");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = watch(&env) => {}
    }
    println!("Stopping.");
    Ok(())
}

/// Returns if a component dies, after saying which one.
async fn watch(env: &TestEnv) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Err(e) = env.check_running() {
            eprintln!("{e}");
            return;
        }
    }
}
