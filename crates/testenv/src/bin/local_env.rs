//! `twc-local-env`: starts the local environment (etcd, kube-apiserver, kube-controller-manager,
//! Temporal dev server, pod runner) and keeps it running until Ctrl-C.
//!
//! `--exit-when-ready` starts it, prints what it would tell a user plus the memory of each
//! server, and stops it again (CI uses this to keep the README's first command honest).

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use twc_testenv::{Options, TestEnv, paths};

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
