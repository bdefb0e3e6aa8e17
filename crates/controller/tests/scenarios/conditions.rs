//! Conditions and Warning events (TWC's `conditions-*` cases).

use serde_json::json;
use twc_api::conditions::{
    CONNECTION_NOT_FOUND, PROGRESSING, READY, ROLLOUT_COMPLETE, TEMPORAL_CLIENT_CREATION_FAILED,
    TEMPORAL_STATE_FETCH_FAILED, WAITING_FOR_PROMOTION,
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
    s.wait_condition(PROGRESSING, "False", ROLLOUT_COMPLETE)
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
