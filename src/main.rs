//! `twc`: the controller binary.

mod build_id;
mod logging;
mod manifests;
mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use logging::LogFormat;
use manifests::{crd, install_rbac_yaml, rbac};

#[derive(Parser)]
#[command(
    name = "twc",
    version,
    long_version = concat!(
        env!("CARGO_PKG_VERSION"),
        "\ncommit: ",
        env!("TWC_GIT_COMMIT"),
        "\nrustc: ",
        env!("TWC_RUSTC_VERSION")
    ),
    about = "Temporal Worker Controller (Rust)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RbacMode {
    Cluster,
    Namespaced,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only these namespaces (comma-separated); default: all.
    #[arg(long, env = "WATCH_NAMESPACES", value_delimiter = ',')]
    watch_namespaces: Vec<String>,
    /// Identity on Temporal writes and the manager identity the controller claims, used as
    /// given. Default, as TWC: `<identity prefix>/<uid of the controller's namespace>`.
    #[arg(long)]
    identity: Option<String>,
    /// The identity's prefix when `--identity` is not given; the UID of the controller's own
    /// namespace (`$POD_NAMESPACE`) is appended, as TWC does. The chart sets it to
    /// `<release>/<namespace>`, as TWC's chart does, so the same release keeps its identity.
    #[arg(
        long,
        env = "CONTROLLER_IDENTITY",
        default_value = "temporal-worker-controller"
    )]
    identity_prefix: String,
    /// Take routing over from worker deployments managed by these identities (comma-separated),
    /// for example a TWC installation's that was uninstalled. Never implicit: any other manager
    /// keeps its routing. TWC's deprecated default, `temporal-worker-controller`, is always
    /// reclaimed, as TWC does.
    #[arg(long, env = "TAKE_OVER_IDENTITIES", value_delimiter = ',')]
    take_over_identity: Vec<String>,
    /// Poll interval while a rollout moves, in seconds.
    #[arg(long, env = "TWC_FAST_POLL_SECONDS", default_value_t = 2)]
    fast_poll_seconds: u64,
    /// Poll interval when nothing moves, in seconds; also how old a Temporal namespace's
    /// ListWorkerDeployments may get before it is listed again.
    #[arg(long, env = "TWC_STEADY_POLL_SECONDS", default_value_t = 60)]
    steady_poll_seconds: u64,
    /// Poll interval while older versions drain, in seconds. Temporal refreshes drainage
    /// every 3 minutes by default (matching.wv.VersionDrainageStatusRefreshInterval); set it
    /// to that server setting.
    #[arg(long, env = "TWC_DRAINAGE_POLL_SECONDS", default_value_t = 180)]
    drainage_poll_seconds: u64,
    /// Worker Deployment reads (DescribeWorkerDeployment, DescribeWorkerDeploymentVersion,
    /// ListWorkerDeployments) per second per Temporal namespace. Keep it under the server's
    /// frontend.globalNamespaceWorkerDeploymentReadRPS (50 by default), which every client of
    /// the namespace shares.
    #[arg(long, env = "TWC_TEMPORAL_READ_RPS", default_value_t = twc_controller::temporal::reads::DEFAULT_READ_RATE, value_parser = positive_rate)]
    temporal_read_rps: f64,
    /// How many Worker Deployment reads may go at once after a quiet spell, per Temporal
    /// namespace.
    #[arg(long, env = "TWC_TEMPORAL_READ_BURST", default_value_t = twc_controller::temporal::reads::DEFAULT_READ_BURST, value_parser = clap::value_parser!(u32).range(1..))]
    temporal_read_burst: u32,
    /// Do not create a new version while this many versions cannot be deleted (75% of the
    /// server's matching.maxVersionsInDeployment, 100 by default).
    #[arg(
        long,
        env = "CONTROLLER_MAX_DEPLOYMENT_VERSIONS_INELIGIBLE_FOR_DELETION",
        default_value_t = 75
    )]
    max_undeletable_versions: usize,
    /// At most this many versioned Deployments restart at once per Temporal address and
    /// namespace when a credential Secret's content changes (a renewed certificate, a new API
    /// key); the next when one is available again. The current and target versions of a
    /// WorkerDeployment restart after its others. A restart whose old client certificate
    /// expires within 15 minutes goes at once. 0 restarts them all at once.
    #[arg(long, env = "TWC_RESTART_PACE", default_value_t = twc_controller::restarts::DEFAULT_LIMIT)]
    restart_pace: usize,
    /// With `--watch-namespaces`: the name of the controller's Role and RoleBinding in each
    /// watched namespace (`twc rbac` names them so; the chart sets the release's). They carry a
    /// finalizer while WorkerDeployments there need them, so deleting the namespace never takes
    /// the controller's rights before their cleanup is done.
    #[arg(long, env = "TWC_RBAC_NAME", default_value = twc_controller::rbac::NAME)]
    rbac_name: String,
    /// Routing back to a version that was current within this many seconds is a rollback:
    /// promoted at once, without ramp steps or gate.
    #[arg(long, env = "ROLLBACK_WINDOW_SECONDS", default_value_t = 3600)]
    rollback_window_seconds: u64,
    /// Kinds a WorkerResourceTemplate may render (comma-separated), each `group/Kind` (for
    /// example `keda.sh/ScaledObject`); kinds compare case-insensitively. A bare `Kind` means
    /// Kubernetes' own group for HorizontalPodAutoscaler and PodDisruptionBudget, and any group
    /// for another kind. The controller also needs RBAC to create, patch and delete each; the
    /// generated RBAC covers the default.
    #[arg(
        long,
        env = "WRT_ALLOWED_KINDS",
        value_delimiter = ',',
        default_value = "autoscaling/HorizontalPodAutoscaler,policy/PodDisruptionBudget"
    )]
    wrt_allowed_kinds: Vec<String>,
    /// Where `/metrics` is served.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// Where `/livez` and `/readyz` are served (may equal the metrics address).
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    health_probe_bind_address: SocketAddr,
    /// Serve `/metrics` only to callers whose bearer token the apiserver authenticates
    /// (TokenReview) and allows to `get` the non-resource URL `/metrics` (SubjectAccessReview),
    /// as TWC's authenticated metrics; the chart grants that with `<release>-metrics-reader`.
    #[arg(long, env = "METRICS_AUTH", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    metrics_auth: bool,
    /// Run only while holding a Lease, so that of several replicas exactly one writes.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// Namespace of the Lease. Default: $POD_NAMESPACE, else the in-cluster service
    /// account's namespace, else `default`.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_ID",
        default_value = "temporal-worker-controller"
    )]
    leader_election_id: String,
    /// How long a Lease stays valid without renewal; a standby takes over after this.
    #[arg(long, env = "LEADER_ELECTION_LEASE_SECONDS", default_value_t = 10)]
    leader_election_lease_seconds: u64,
    /// The leader steps down if it could not renew for this long (less than the lease).
    #[arg(
        long,
        env = "LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
        default_value_t = 7
    )]
    leader_election_renew_deadline_seconds: u64,
    /// How often the leader renews and a standby retries.
    #[arg(long, env = "LEADER_ELECTION_RETRY_SECONDS", default_value_t = 2)]
    leader_election_retry_seconds: u64,
    /// How log lines are written to stdout: `text` for people (coloured only on a terminal),
    /// `json` for log collectors.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter: a level (off, error, warn, info, debug, trace) or comma-separated
    /// `target=level` directives after it, e.g. `info,twc_controller=debug`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_parser = logging::parse_level)]
    log_level: String,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller (kubeconfig from KUBECONFIG / ~/.kube/config, or in-cluster).
    Run(Box<RunArgs>),
    /// Print the RBAC the controller needs, or write it into a directory.
    Rbac {
        /// `cluster` (ClusterRoles) or `namespaced` (a Role per watched namespace plus a
        /// minimal ClusterRole, without ClusterConnection rights).
        #[arg(long, value_enum, default_value_t = RbacMode::Cluster)]
        mode: RbacMode,
        /// Write `cluster.yaml` and `namespaced.yaml` here instead of printing.
        #[arg(long, conflicts_with_all = ["service_account", "watch_namespaces"])]
        dir: Option<PathBuf>,
        /// Also print the ServiceAccount the controller runs as, in `--namespace`, and bind
        /// every role to it; the leader-election Role is then in `--namespace`. Everything an
        /// install without Helm needs besides `twc crd` and `config/deploy/`.
        #[arg(long, requires = "namespace")]
        service_account: Option<String>,
        /// The controller's namespace (it must exist): where the ServiceAccount and the Lease
        /// are.
        #[arg(long, requires = "service_account")]
        namespace: Option<String>,
        /// With `--mode namespaced`: the namespaces the controller watches (comma-separated),
        /// each getting the Role and its binding. The controller needs the same
        /// `--watch-namespaces`.
        #[arg(long, value_delimiter = ',', requires = "service_account")]
        watch_namespaces: Vec<String>,
    },
    /// Print the version each WorkerDeployment in a manifest makes: its build ID, versioned
    /// Deployment and Temporal worker deployment (no cluster needed; the same rules as the
    /// controller's, and TWC's).
    BuildId {
        /// The manifest: YAML (several documents) or JSON (an object, an array or a List);
        /// `-` for standard input.
        #[arg(short = 'f', long = "filename")]
        file: PathBuf,
        /// The namespace of manifests that name none.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// `table`, or `json`: an array of objects with the keys namespace, name, buildID,
        /// versionedDeploymentName, temporalWorkerDeploymentName, in input order.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Show rollouts: one line per WorkerDeployment, or everything about NAME (target and
    /// current build IDs, ramp, step and time left, failed build, controls, conditions,
    /// versions with the workflows still open on each, last events). The open workflows are
    /// counted in Temporal through the WorkerDeployment's connection, with its credential
    /// Secret read with your own rights. Also `kubectl twc status` with the binary on PATH as
    /// `kubectl-twc`.
    Status {
        /// A WorkerDeployment; without it, one line per WorkerDeployment.
        name: Option<String>,
        /// The namespace; default: the kubeconfig context's.
        #[arg(short, long)]
        namespace: Option<String>,
        /// Every namespace (without NAME).
        #[arg(short = 'A', long, conflicts_with_all = ["namespace", "name"])]
        all_namespaces: bool,
        /// Draw again every 2 seconds.
        #[arg(short, long)]
        watch: bool,
    },
    /// Hold routing changes of a rollout: no ramp step, no promotion (annotation
    /// temporal.io/rollout-paused). A failing build is still rolled back.
    Pause(ControlArgs),
    /// Let a paused rollout go on.
    Resume(ControlArgs),
    /// Promote the target build now, skipping the remaining ramp steps (annotation
    /// temporal.io/promote).
    Promote(ControlArgs),
    /// Roll the target back now and mark it failed (annotation temporal.io/abort).
    Abort(ControlArgs),
    /// Clear the target's failed mark; its progress deadline starts again (annotation
    /// temporal.io/retry).
    Retry(ControlArgs),
    /// Print the CustomResourceDefinitions as YAML, or write one file per CRD into a directory.
    Crd {
        /// Write `temporal.io_<plural>.yaml` files here instead of printing.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// The WorkerDeployment a control acts on.
#[derive(clap::Args)]
struct ControlArgs {
    /// The WorkerDeployment.
    name: String,
    /// Its namespace; default: the kubeconfig context's.
    #[arg(short, long)]
    namespace: Option<String>,
}

/// A client from the kubeconfig (or in-cluster) and its default namespace.
async fn kube_client() -> anyhow::Result<(Client, String)> {
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    let namespace = config.default_namespace.clone();
    Ok((Client::try_from(config)?, namespace))
}

fn control(args: ControlArgs, which: status::Control) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async move {
        let (client, default_ns) = kube_client().await?;
        let ns = args.namespace.unwrap_or(default_ns);
        println!("{}", status::control(client, &ns, &args.name, which).await?);
        Ok(())
    })
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Status {
            name,
            namespace,
            all_namespaces,
            watch,
        } => tokio::runtime::Runtime::new()?.block_on(async move {
            let (client, default_ns) = kube_client().await?;
            let ns = (!all_namespaces).then(|| namespace.unwrap_or(default_ns));
            status::show(client, ns.as_deref(), name.as_deref(), watch).await
        }),
        Command::Pause(a) => control(a, status::Control::Pause),
        Command::Resume(a) => control(a, status::Control::Resume),
        Command::Promote(a) => control(a, status::Control::Promote),
        Command::Abort(a) => control(a, status::Control::Abort),
        Command::Retry(a) => control(a, status::Control::Retry),
        Command::Crd { dir } => crd(dir),
        Command::BuildId {
            file,
            namespace,
            output,
        } => {
            let versions = build_id::versions(&build_id::read(&file)?, &namespace)?;
            match output {
                Output::Table => print!("{}", build_id::table(&versions)),
                Output::Json => println!("{}", serde_json::to_string_pretty(&versions)?),
            }
            Ok(())
        }
        Command::Rbac {
            mode,
            dir,
            service_account,
            namespace,
            watch_namespaces,
        } => match (service_account, namespace) {
            (Some(sa), Some(ns)) => {
                print!("{}", install_rbac_yaml(mode, &sa, &ns, &watch_namespaces)?);
                Ok(())
            }
            _ => rbac(mode, dir),
        },
        Command::Run(args) => {
            let RunArgs {
                watch_namespaces,
                identity,
                identity_prefix,
                take_over_identity,
                fast_poll_seconds,
                steady_poll_seconds,
                drainage_poll_seconds,
                temporal_read_rps,
                temporal_read_burst,
                max_undeletable_versions,
                restart_pace,
                rbac_name,
                rollback_window_seconds,
                wrt_allowed_kinds,
                metrics_bind_address,
                health_probe_bind_address,
                metrics_auth,
                leader_elect,
                leader_election_namespace,
                leader_election_id,
                leader_election_lease_seconds,
                leader_election_renew_deadline_seconds,
                leader_election_retry_seconds,
                log_format,
                log_level,
            } = *args;
            logging::init(log_format, &log_level)?;
            let build = &logging::BUILD;
            tracing::info!(
                version = build.version,
                commit = build.commit,
                rustc = build.rustc,
                "twc build"
            );
            twc_controller::metrics::global().set_build_info(
                build.version,
                build.commit,
                build.rustc,
            );
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(async move {
                // Its requests are counted (`rest_client_requests_total`).
                let kube_config = kube::Config::infer()
                    .await
                    .context("no Kubernetes configuration (KUBECONFIG or in-cluster)")?;
                let client = twc_controller::metrics::rest_client::client(kube_config)?;
                let identity = match identity {
                    Some(i) => i,
                    None => default_identity(&client, &identity_prefix).await?,
                };
                let take_over_identities: Vec<String> = take_over_identity
                    .into_iter()
                    .filter(|i| !i.is_empty())
                    .collect();
                tracing::info!(identity, ?watch_namespaces, "starting");
                let config = twc_controller::Config {
                    identity,
                    take_over_identities,
                    watch_namespaces,
                    intervals: twc_controller::config::Intervals {
                        moving: Duration::from_secs(fast_poll_seconds.max(1)),
                        steady: Duration::from_secs(steady_poll_seconds.max(1)),
                        drainage: Duration::from_secs(drainage_poll_seconds.max(1)),
                    },
                    reads: twc_controller::temporal::reads::ReadConfig {
                        rate: temporal_read_rps,
                        burst: temporal_read_burst,
                        ..Default::default()
                    },
                    limits: twc_controller::config::Limits {
                        max_undeletable_versions,
                        rollback_window: Duration::from_secs(rollback_window_seconds),
                    },
                    wrt_allowed_kinds,
                    restart_pace,
                    rbac_name,
                    ..Default::default()
                };
                let leader_election = leader_elect.then(|| {
                    let namespace = leader_election_namespace.unwrap_or_else(own_namespace);
                    twc_controller::leader::LeaseConfig {
                        lease_duration: Duration::from_secs(leader_election_lease_seconds.max(2)),
                        renew_deadline: Duration::from_secs(
                            leader_election_renew_deadline_seconds.max(1),
                        ),
                        retry_period: Duration::from_secs(leader_election_retry_seconds.max(1)),
                        ..twc_controller::leader::LeaseConfig::new(
                            &namespace,
                            &leader_election_id,
                            &replica_identity(),
                        )
                    }
                });
                if let Some(l) = &leader_election {
                    anyhow::ensure!(
                        l.renew_deadline < l.lease_duration,
                        "the renew deadline must be shorter than the lease duration"
                    );
                }
                let run = twc_controller::manager::RunConfig {
                    controller: config,
                    leader_election,
                    metrics_addr: metrics_bind_address,
                    health_addr: health_probe_bind_address,
                    metrics_auth,
                };
                twc_controller::manager::run(client, run, shutdown_signal()).await?;
                tracing::info!("stopped");
                Ok(())
            })
        }
    }
}

/// TWC's identity: the prefix, `/`, the UID of the controller's own namespace. The same
/// installation (release name and namespace) keeps the same identity across restarts,
/// upgrades and a move from TWC.
async fn default_identity(client: &Client, prefix: &str) -> anyhow::Result<String> {
    anyhow::ensure!(!prefix.is_empty(), "the identity prefix is empty");
    let own = own_namespace();
    let ns = Api::<Namespace>::all(client.clone())
        .get(&own)
        .await
        .with_context(|| {
            format!("reading the namespace {own:?} for the identity's suffix (or pass --identity)")
        })?;
    let uid = ns.metadata.uid.unwrap_or_default();
    anyhow::ensure!(!uid.is_empty(), "the namespace {own:?} has no UID");
    Ok(format!("{prefix}/{uid}"))
}

/// The namespace this pod runs in, for the Lease.
/// A read rate: a positive number of reads per second.
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a positive number of reads per second"
        )),
    }
}

fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_string())
        })
        .unwrap_or_else(|| "default".into())
}

/// Unique per replica: the pod (host) name plus a random suffix, so a restarted pod with the
/// same name never mistakes its predecessor's Lease for its own.
fn replica_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "twc".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{:08x}", nanos ^ std::process::id().rotate_left(16))
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
