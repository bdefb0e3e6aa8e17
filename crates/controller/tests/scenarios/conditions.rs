//! Conditions and Warning events (TWC's `conditions-*` cases).

use serde_json::json;
use twc_api::VersionStatus::Current;
use twc_api::conditions::{
    ACTIVE_POLLERS, CONNECTION_NOT_FOUND, POLLER_STATUS_UNKNOWN, PROGRESSING, READY,
    ROLLOUT_COMPLETE, TEMPORAL_CLIENT_CREATION_FAILED, TEMPORAL_STATE_FETCH_FAILED,
    WAITING_FOR_PROMOTION,
};

use crate::common::World;
use crate::harness::*;

/// `conditions-progressing`: Manual, registered and waiting for a person.
pub async fn conditions_progressing(w: &'static World) {
    let mut s = Scenario::new(w, "cond-progressing").await;
    s.create(s.spec(manual(), &image("v1"))).await;
    s.connect().await;
    s.wait_condition(PROGRESSING, "True", WAITING_FOR_PROMOTION)
        .await;
    s.wait_condition(READY, "False", WAITING_FOR_PROMOTION)
        .await;
}

/// `conditions-ready-reason-rollout-complete`.
pub async fn conditions_ready_reason_rollout_complete(w: &'static World) {
    let mut s = Scenario::new(w, "cond-complete").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect().await;
    let message = s.wait_condition(READY, "True", ROLLOUT_COMPLETE).await;
    assert!(message.contains(&s.target_build_id()), "{message}");
    // Complete: Progressing is False, saying whether its workers poll (TWC #448) once the
    // worker list can tell (wrt_current_version_without_pollers_is_reported follows it).
    let build = s.target_build_id();
    let wd = s
        .wait_status(&Expect::target(&build, Current).current(&build))
        .await;
    let progressing = crate::common::condition(&wd, PROGRESSING);
    assert!(
        progressing.as_ref().is_some_and(
            |(st, r, _)| st == "False" && (r == ACTIVE_POLLERS || r == POLLER_STATUS_UNKNOWN)
        ),
        "{progressing:?}"
    );
    // Promoted without waiting for its task queues (AllAtOnce): the current version's status
    // shows them soon after (the pass after the promotion reads them).
    let queues = vec![twc_api::TaskQueue {
        name: s.name.clone(),
    }];
    crate::common::wait_wd(
        &s.client,
        &s.ns,
        &s.name,
        "the current version's task queues in the status",
        WAIT,
        |wd| {
            wd.status
                .as_ref()
                .and_then(|st| st.current_version.as_ref())
                .is_some_and(|t| t.base.build_id == build && t.base.task_queues == queues)
        },
    )
    .await;
}

/// `conditions-missing-connection`.
pub async fn conditions_missing_connection(w: &'static World) {
    let mut s = Scenario::new(w, "cond-no-conn").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    let message = s
        .wait_condition(PROGRESSING, "False", CONNECTION_NOT_FOUND)
        .await;
    assert!(message.contains(CONNECTION), "{message}");
    s.wait_warning(CONNECTION_NOT_FOUND).await;
}

/// `conditions-client-creation-failed`: nothing listens on the Connection's port.
pub async fn conditions_client_creation_failed(w: &'static World) {
    let mut s = Scenario::new(w, "cond-no-client").await;
    s.create(s.spec(all_at_once(), &image("v1"))).await;
    s.connect_to(json!({"hostPort": "localhost:1"})).await;
    s.wait_condition(PROGRESSING, "False", TEMPORAL_CLIENT_CREATION_FAILED)
        .await;
    s.wait_warning(TEMPORAL_CLIENT_CREATION_FAILED).await;
}

/// `conditions-temporal-state-fetch-failed`: the Temporal namespace does not exist.
pub async fn conditions_temporal_state_fetch_failed(w: &'static World) {
    let mut s = Scenario::new(w, "cond-no-ns").await;
    let mut spec = s.spec(all_at_once(), &image("v1"));
    spec["workerOptions"]["temporalNamespace"] = json!("does-not-exist");
    s.create(spec).await;
    s.connect().await;
    let message = s
        .wait_condition(PROGRESSING, "False", TEMPORAL_STATE_FETCH_FAILED)
        .await;
    assert!(message.contains("does-not-exist"), "{message}");
    s.wait_warning(TEMPORAL_STATE_FETCH_FAILED).await;
}

/// A third dev server, for this binary only, that allows one worker-deployment read per
/// second and namespace (TWC's `tsRateLimit`). Started on first use.
async fn rate_limited_server() -> &'static twc_testenv::TemporalServer {
    static SERVER: tokio::sync::OnceCell<twc_testenv::TemporalServer> =
        tokio::sync::OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let mut opts = twc_testenv::TemporalOptions::default();
            opts.dynamic_config.push((
                "frontend.globalNamespaceWorkerDeploymentReadRPS".into(),
                "1".into(),
            ));
            opts.namespace_pool = 5;
            let dir = twc_testenv::paths::log_dir().join("temporal-rate-limited");
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            twc_testenv::TemporalServer::start(&opts, &dir)
                .await
                .unwrap_or_else(|e| panic!("the rate-limited dev server: {e}"))
        })
        .await
}

/// `rate-limit-burst-surfaces-error`: WorkerDeployments read one Temporal namespace limited
/// to one read per second, far under the controller's read budget (20 per second); at least
/// one says so, with TWC's reason and "Rate limited". Ours also backs off (30 s or more)
/// instead of retrying into the limit, so the condition stays. Five instead of TWC's ten (each
/// runs a worker: the limit applies to deployments that exist, a `NotFound` read is not
/// limited). A rollout alone now reads too little to stay over the limit, so once they have
/// rolled out their specs are changed ten times a second (`replicas` 1, 2, 1, ...), as a
/// GitOps tool fighting another writer would: every new generation is read afresh.
pub async fn rate_limit_burst_surfaces_error(w: &'static World) {
    let server = rate_limited_server().await;
    let mut scenarios = Vec::new();
    let mut shared_ns: Option<String> = None;
    for i in 0..5 {
        let mut s = Scenario::on(w, server, &format!("rate-limit-{i}")).await;
        let temporal_ns = shared_ns
            .get_or_insert_with(|| s.temporal_ns.clone())
            .clone();
        s.temporal_ns = temporal_ns.clone();
        let mut spec = s.spec(all_at_once(), &image("v1"));
        spec["workerOptions"]["temporalNamespace"] = json!(temporal_ns);
        s.create(spec).await;
        scenarios.push(s);
    }
    for s in &scenarios {
        s.connect().await;
    }
    let thrash = async {
        for round in 0..600 {
            for s in &scenarios {
                let patch = json!({"spec": {"replicas": 1 + round % 2}});
                let _ = s
                    .wds()
                    .patch(
                        "worker",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let wait = twc_testenv::wait_for(
        "a WorkerDeployment reporting the rate limit",
        std::time::Duration::from_secs(60),
        || {
            let scenarios = &scenarios;
            async move {
                for s in scenarios {
                    let wd = s.get().await;
                    if let Some((status, reason, message)) =
                        crate::common::condition(&wd, PROGRESSING)
                        && status == "False"
                        && reason == TEMPORAL_STATE_FETCH_FAILED
                        && message.contains("Rate limited")
                    {
                        return Ok(message);
                    }
                }
                let mut seen = Vec::new();
                for s in scenarios {
                    seen.push(format!(
                        "{:?}",
                        crate::common::condition(&s.get().await, PROGRESSING)
                    ));
                }
                Err(format!("conditions: {seen:?}"))
            }
        },
    );
    let limited = tokio::select! {
        r = wait => r.map_err(|e| e.to_string()),
        _ = thrash => Err("the specs stopped changing".to_string()),
    }
    .unwrap_or_else(|e| {
        panic!(
            "{e}\ncontroller log:\n{}",
            crate::common::logs_about(&scenarios[0].ns)
        )
    });
    assert!(limited.contains("ResourceExhausted"), "{limited}");
}
