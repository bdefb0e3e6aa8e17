//! The faults: which there are, injecting them at seeded random times, and each one applied.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use twc_testenv::Signal;
use twc_testenv::api_proxy::Faults;

use crate::invariants::pod_ready;
use crate::replicas::{Replica, addrs, leader_of, restart_stopped};
use crate::rollouts::{converged, make_current_drain, set_image};
use crate::setup::connection_ref;
use crate::{BLIPS, CLUSTER_CONNECTION_B, IMAGE, Place, Rng, Run, SCALED};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Fault {
    ControllerKill,
    LeaderFailover,
    ApiserverRestart,
    TemporalRestart,
    ConnectionRefChange,
    RapidImageChanges,
    ScalerTakeover,
    SecretRotation,
    /// The client certificates moved to a new CA; the old one distrusted once the workers
    /// restarted (`tls.rs`).
    NewCaRotation,
    /// The namespaced Connection moved from mutual TLS to an API key, or back
    /// (`auth_switch.rs`).
    AuthModeSwitch,
    /// The apiserver, as the controllers see it, answers some writes 409 Conflict (not done)
    /// and some requests 500 after serving them (done, answer lost), for a few seconds.
    ApiserverFaults,
    /// `temporalNamespace` changed (once per WorkerDeployment) while it is at its target and
    /// an older version drains.
    NamespaceChange,
    /// The connectionRef changed (once per WorkerDeployment) to a ClusterConnection of a
    /// second Temporal server while it is at its target and an older version drains.
    ServerChange,
    /// The leader paused (SIGSTOP) until the standby took over, then woken (SIGCONT) after
    /// its lease expired: two replicas that each believed they lead, one of them stale.
    PausedLeader,
    /// Namespace-scoped install only: the watched namespace deleted with everything in it,
    /// then created again as a GitOps tool would (`namespace_gone.rs`).
    WatchedNamespaceDeleted,
    /// Injected by the driver: a WorkerDeployment deleted while its previous version drains a
    /// pinned workflow, then created again.
    DeleteWhileDraining,
    /// The same, deleted while both controller replicas are down.
    DeleteWhileControllerDown,
    /// Real node only: SIGKILL to a worker container whose version has another ready.
    WorkerContainerKill,
    /// Real node only.
    KubeletRestart,
}

impl Fault {
    /// Every fault, in the report's order.
    const EVERY: [Fault; 19] = [
        Fault::ControllerKill,
        Fault::LeaderFailover,
        Fault::ApiserverRestart,
        Fault::TemporalRestart,
        Fault::ConnectionRefChange,
        Fault::RapidImageChanges,
        Fault::ScalerTakeover,
        Fault::SecretRotation,
        Fault::NewCaRotation,
        Fault::AuthModeSwitch,
        Fault::ApiserverFaults,
        Fault::NamespaceChange,
        Fault::ServerChange,
        Fault::PausedLeader,
        Fault::WatchedNamespaceDeleted,
        Fault::DeleteWhileDraining,
        Fault::DeleteWhileControllerDown,
        Fault::WorkerContainerKill,
        Fault::KubeletRestart,
    ];

    /// The faults of a run: the node's own only on a real node; in a namespace-scoped install,
    /// none that needs a ClusterConnection (it cannot use one) and the deletion of its watched
    /// namespace, which only that install is judged on.
    pub(crate) fn of_run(real_node: bool, namespace_scoped: bool) -> Vec<Fault> {
        Fault::EVERY
            .into_iter()
            .filter(|f| match f {
                Fault::WorkerContainerKill | Fault::KubeletRestart => real_node,
                Fault::ConnectionRefChange | Fault::ServerChange => !namespace_scoped,
                Fault::WatchedNamespaceDeleted => namespace_scoped,
                _ => true,
            })
            .collect()
    }

    /// The faults the injector picks from (the driver injects the deletions itself).
    fn injected(real_node: bool, namespace_scoped: bool) -> Vec<Fault> {
        Fault::of_run(real_node, namespace_scoped)
            .into_iter()
            .filter(|f| {
                !matches!(
                    f,
                    Fault::DeleteWhileDraining | Fault::DeleteWhileControllerDown
                )
            })
            .collect()
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::ControllerKill => "controller SIGKILL + restart",
            Fault::LeaderFailover => "leader failover",
            Fault::ApiserverRestart => "kube-apiserver restart",
            Fault::TemporalRestart => "Temporal restart",
            Fault::ConnectionRefChange => "connectionRef change",
            Fault::RapidImageChanges => "rapid image changes",
            Fault::ScalerTakeover => "scaler takes over replicas",
            Fault::SecretRotation => "one Secret shared by every WD renewed",
            Fault::NewCaRotation => "client certificates to a new CA",
            Fault::AuthModeSwitch => "auth mode switched",
            Fault::ApiserverFaults => "apiserver answers 409 and 500",
            Fault::NamespaceChange => "temporalNamespace change mid-drain",
            Fault::ServerChange => "another server mid-drain",
            Fault::PausedLeader => "leader paused past its lease",
            Fault::WatchedNamespaceDeleted => "watched namespace deleted",
            Fault::DeleteWhileDraining => "deleted while a version drains",
            Fault::DeleteWhileControllerDown => "deleted while controller down",
            Fault::WorkerContainerKill => "worker container SIGKILL",
            Fault::KubeletRestart => "kubelet restart",
        }
    }
}

/// Injects a fault every `every` seconds on average until the driver is done.
pub(crate) async fn inject(
    run: &Run<'_>,
    controllers: &Mutex<[Replica; 2]>,
    mut rng: Rng,
    every: u64,
    only: Option<&str>,
) {
    let kinds: Vec<Fault> = Fault::injected(run.env.node().is_some(), run.namespace_scoped)
        .into_iter()
        .filter(|f| only.is_none_or(|o| o == f.name()))
        .collect();
    if kinds.is_empty() {
        eprintln!("   no fault is named {only:?}; none injected");
        return;
    }
    loop {
        let gap = rng.between(every / 2, every + every / 2).max(1);
        for _ in 0..gap * 10 {
            if run.done.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let fault = rng.pick(&kinds);
        let at = Instant::now();
        if let Err(e) = apply(run, controllers, &mut rng, fault).await {
            eprintln!("   fault {} could not be injected: {e:#}", fault.name());
            continue;
        }
        println!("   fault: {}", fault.name());
        run.report().faults.push((fault, at, None));
    }
}

async fn apply(
    run: &Run<'_>,
    controllers: &Mutex<[Replica; 2]>,
    rng: &mut Rng,
    fault: Fault,
) -> anyhow::Result<()> {
    match fault {
        Fault::ControllerKill => {
            let i = rng.between(0, 1) as usize;
            kill(controllers, i)?;
            tokio::time::sleep(Duration::from_millis(rng.between(500, 3000))).await;
            restart_stopped(controllers)?;
        }
        Fault::LeaderFailover => {
            let leader = leader_of(&addrs(controllers))
                .await
                .context("no leader to fail over from")?;
            kill(controllers, leader)?;
            let deadline = Instant::now() + Duration::from_secs(30);
            while leader_of(&addrs(controllers)).await != Some(1 - leader) {
                if Instant::now() > deadline {
                    bail!("the standby did not take over within 30 s");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            restart_stopped(controllers)?;
        }
        Fault::PausedLeader => pause_leader(controllers, rng).await?,
        Fault::WatchedNamespaceDeleted => crate::namespace_gone::delete_and_recreate(run).await?,
        Fault::NamespaceChange => move_away(run, rng, false).await?,
        Fault::ServerChange => move_away(run, rng, true).await?,
        Fault::ApiserverFaults => {
            run.api_proxy.set_faults(Faults {
                conflict_every: 3,
                error_every: 5,
            });
            tokio::time::sleep(Duration::from_secs(rng.between(5, 15))).await;
            run.api_proxy.set_faults(Faults::default());
        }
        Fault::DeleteWhileDraining | Fault::DeleteWhileControllerDown => {
            bail!("injected by the driver")
        }
        Fault::ApiserverRestart => {
            run.env
                .control_plane()
                .restart_apiserver(Duration::from_secs(5))
                .await?
        }
        Fault::TemporalRestart => {
            run.report().temporal_restarted = Some(Instant::now());
            let restarted = run.env.temporal().restart(Duration::from_secs(5)).await;
            run.report().temporal_restarted = Some(Instant::now());
            restarted?
        }
        Fault::WorkerContainerKill => kill_worker_container(run, rng).await?,
        Fault::KubeletRestart => {
            let node = run.env.node().context("no real node")?;
            node.restart_kubelet(Duration::from_secs(2)).await?
        }
        Fault::ConnectionRefChange => {
            let i = rng.between(0, run.names.len() as u64 - 1) as usize;
            let name = &run.names[i];
            // Between the two connections to the first server; one moved to the second
            // server stays there.
            if run.place_of(name).server != 0 {
                bail!("{name} is on the second server");
            }
            let _moving = run.spec_lock.lock().await;
            let wd = run.wds().get(name).await?;
            let now_cluster = matches!(
                wd.spec.worker_options.connection_ref.target(),
                Some((twc_api::ConnectionKind::ClusterConnection, _))
            );
            let next = connection_ref(usize::from(now_cluster));
            run.wds()
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"workerOptions": {"connectionRef": next}}})),
                )
                .await?;
        }
        Fault::ScalerTakeover => {
            let i = rng.between(0, run.names.len() as u64 - 1) as usize;
            let name = run.names[i].clone();
            take_over(run, &name).await?;
        }
        Fault::SecretRotation => crate::tls::renew(run).await?,
        Fault::NewCaRotation => crate::tls::rotate_ca(run).await?,
        Fault::AuthModeSwitch => crate::auth_switch::switch(run).await?,
        Fault::RapidImageChanges => {
            let i = rng.between(0, run.names.len() as u64 - 1) as usize;
            let name = &run.names[i];
            let wd = run.wds().get(name).await?;
            let image = crate::groups::image_of(&wd).context("no image")?;
            // A real node has the blips it was given (tag_images).
            let blips = if run.env.node().is_some() {
                BLIPS
            } else {
                1_000_000
            };
            let blip = format!("{IMAGE}:blip-{}", rng.next() % blips);
            set_image(run, name, &blip).await;
            tokio::time::sleep(Duration::from_millis(rng.between(200, 1500))).await;
            // Back to the image the driver set, unless the driver set another meanwhile.
            let paths = run.image_paths(name);
            let tests = paths
                .iter()
                .map(|path| json!({"op": "test", "path": path, "value": blip}));
            let replaces = paths
                .iter()
                .map(|path| json!({"op": "replace", "path": path, "value": image}));
            let back = serde_json::from_value(json!(tests.chain(replaces).collect::<Vec<_>>()))?;
            let _ = run
                .wds()
                .patch(name, &PatchParams::default(), &Patch::Json::<()>(back))
                .await;
        }
    }
    Ok(())
}

/// A WorkerResourceTemplate rendering an HPA for `name` (once; for its activity group when it
/// has groups), then, once the controller applied it, the current version's Deployment (of
/// that group) scaled to [`SCALED`] as an HPA would.
async fn take_over(run: &Run<'_>, name: &str) -> anyhow::Result<()> {
    use twc_api::WorkerResourceTemplate;
    let wrts: Api<WorkerResourceTemplate> = Api::namespaced(run.client.clone(), &run.ns);
    let wrt_name = format!("{name}-hpa");
    if wrts.get_opt(&wrt_name).await?.is_none() {
        let mut spec = json!({"workerDeploymentRef": {"name": name}, "template": {
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "spec": {"scaleTargetRef": {}, "minReplicas": 1, "maxReplicas": 3, "metrics": []}
        }});
        if run.grouped(name) {
            spec["workerGroup"] = json!(crate::groups::SCALED_GROUP);
        }
        let wrt: WorkerResourceTemplate = serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerResourceTemplate",
            "metadata": {"name": wrt_name},
            "spec": spec
        }))?;
        wrts.create(&PostParams::default(), &wrt).await?;
    }
    run.report().autoscaled.insert(name.to_string());
    let state = run.describe(name).await.context("Temporal unreadable")?;
    let build = state.current.context("no current version")?;
    // The controller has seen the template once it applied it for this build.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let applied = wrts.get(&wrt_name).await?.status.is_some_and(|s| {
            s.versions
                .iter()
                .any(|v| v.build_id == build && v.last_applied_hash.is_some())
        });
        if applied {
            break;
        }
        if Instant::now() > deadline {
            bail!("the controller did not apply {wrt_name} for {build} within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let scaled = run
        .scaled_member(name, &build)
        .context("no Deployment to scale")?;
    run.deployments()
        .patch_scale(
            &scaled.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": SCALED}})),
        )
        .await?;
    run.report().scaled.push((name.to_string(), build));
    Ok(())
}

/// Moves a WorkerDeployment that has not made this move yet mid-drain, to the run's other
/// Temporal namespace or (`to_server`) to the second Temporal server: once it is at its
/// target, a pinned workflow of 60-75 s on its current version and a new image make that
/// version Draining; then the spec moves.
async fn move_away(run: &Run<'_>, rng: &mut Rng, to_server: bool) -> anyhow::Result<()> {
    let _moving = run.spec_lock.lock().await;
    let start = rng.next() as usize;
    let mut chosen = None;
    for k in 0..run.names.len() {
        let name = &run.names[(start + k) % run.names.len()];
        let here = run.place_of(name);
        let moved = if to_server {
            here.server != 0
        } else {
            here.namespace != run.temporal_ns
        };
        if !moved && converged(run, name).await == Some(true) {
            chosen = Some((name, here));
            break;
        }
    }
    let (name, here) =
        chosen.context("no WorkerDeployment at its target that has not moved yet")?;
    // A real node has the blips it was given (tag_images).
    let blips = if run.env.node().is_some() {
        BLIPS
    } else {
        1_000_000
    };
    let image = format!("{IMAGE}:blip-{}", rng.next() % blips);
    let id = format!("pinned-{name}-moved-{to_server}");
    let old = make_current_drain(run, rng, name, &id, &image)
        .await
        .context("no version of it could be made to drain")?;
    let (there, patch) = if to_server {
        let there = Place {
            server: 1,
            namespace: here.namespace.clone(),
        };
        let to = json!({"objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": CLUSTER_CONNECTION_B}});
        (
            there,
            json!({"spec": {"workerOptions": {"connectionRef": to}}}),
        )
    } else {
        let there = Place {
            server: here.server,
            namespace: run.moved_ns.clone(),
        };
        let to = json!({"spec": {"workerOptions": {"temporalNamespace": run.moved_ns}}});
        (there, to)
    };
    run.move_to(name, there.clone());
    if let Err(e) = run
        .wds()
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        run.move_back(name);
        return Err(e.into());
    }
    println!("   {name} moves from {here} to {there} ({old} draining)");
    Ok(())
}

/// SIGSTOPs the leader, waits until the standby leads (its lease expired), lets a few more
/// seconds pass, then SIGCONTs it: the woken replica must notice it lost the lease before it
/// writes anything.
async fn pause_leader(controllers: &Mutex<[Replica; 2]>, rng: &mut Rng) -> anyhow::Result<()> {
    let leader = leader_of(&addrs(controllers))
        .await
        .context("no leader to pause")?;
    signal(controllers, leader, Signal::SIGSTOP)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut took_over = false;
    while Instant::now() < deadline {
        // Only the standby is asked: the paused one would not answer.
        let standby = addrs(controllers)
            .get(1 - leader)
            .cloned()
            .unwrap_or_default();
        if leader_of(std::slice::from_ref(&standby)).await.is_some() {
            took_over = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(rng.between(500, 4000))).await;
    signal(controllers, leader, Signal::SIGCONT)?;
    if !took_over {
        bail!("the standby did not take over from the paused leader within 30 s");
    }
    Ok(())
}

fn signal(controllers: &Mutex<[Replica; 2]>, i: usize, signal: Signal) -> anyhow::Result<()> {
    let c = controllers
        .lock()
        .map_err(|_| anyhow::anyhow!("controllers lock poisoned"))?;
    c[i].process.signal(signal);
    Ok(())
}

pub(crate) fn kill(controllers: &Mutex<[Replica; 2]>, i: usize) -> anyhow::Result<()> {
    let mut c = controllers
        .lock()
        .map_err(|_| anyhow::anyhow!("controllers lock poisoned"))?;
    c[i].process.kill();
    Ok(())
}

/// SIGKILLs one worker container whose Deployment has another replica ready, so that the
/// kill tests the kubelet's restart and the controller's patience, not I1 (a node losing a
/// version's only worker is not the controller's doing).
async fn kill_worker_container(run: &Run<'_>, rng: &mut Rng) -> anyhow::Result<()> {
    let node = run.env.node().context("no real node")?;
    let pods = Api::<Pod>::namespaced(run.client.clone(), &run.ns)
        .list(&Default::default())
        .await?
        .items;
    let mut candidates = Vec::new();
    for pod in &pods {
        let Some(owner) = pod.labels().get("temporal.io/build-id").cloned() else {
            continue;
        };
        let ready_siblings = pods
            .iter()
            .filter(|p| p.labels().get("temporal.io/build-id") == Some(&owner))
            .filter(|p| p.name_any() != pod.name_any())
            .filter(|p| pod_ready(p))
            .count();
        let id = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.container_id.as_deref())
            .and_then(|id| id.strip_prefix("containerd://"))
            .map(str::to_string);
        if let Some(id) = id
            && ready_siblings > 0
            && pod_ready(pod)
        {
            candidates.push(id);
        }
    }
    if candidates.is_empty() {
        bail!("no worker container with a ready sibling");
    }
    let id = &candidates[(rng.next() % candidates.len() as u64) as usize];
    node.ctr(&["tasks", "kill", "--signal", "SIGKILL", id])?;
    Ok(())
}
