//! The controller's Event recorder against a real apiserver: an event repeated within the
//! series window is one `events.k8s.io/v1` Event whose `series.count` counts the repeats;
//! another note, or another object, is another Event.

mod common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use twc_controller::events::{Event, EventType, Recorder};

fn event(note: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: "WaitingForPollers".into(),
        action: "Reconcile".into(),
        note: Some(note.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_become_one_event_with_a_count() -> TestResult {
    let w = world(false).await?;
    let client = w.client().await;
    let ns = w.tenant("events").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut objects = Vec::new();
    for name in ["a", "b"] {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        objects.push(
            maps.create(&PostParams::default(), &cm)
                .await?
                .object_ref(&()),
        );
    }
    let recorder = Recorder::new(client.clone(), "twc-events-test", None);
    for _ in 0..3 {
        recorder
            .publish(&event("no pollers yet"), &objects[0])
            .await?;
    }
    recorder.publish(&event("still none"), &objects[0]).await?;
    recorder
        .publish(&event("no pollers yet"), &objects[1])
        .await?;

    let events: Api<K8sEvent> = Api::namespaced(client, &ns);
    let listed = events.list(&ListParams::default()).await?.items;
    let about = |name: &str, note: &str| -> Vec<&K8sEvent> {
        listed
            .iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .filter(|e| e.note.as_deref() == Some(note))
            .collect()
    };
    let repeated = about("a", "no pollers yet");
    assert_eq!(
        repeated.len(),
        1,
        "one Event for three publishes: {listed:?}"
    );
    let series = repeated[0].series.as_ref().map(|s| s.count);
    assert_eq!(series, Some(3), "its series counts the repeats");
    assert_eq!(
        repeated[0].reporting_controller.as_deref(),
        Some("twc-events-test")
    );
    assert_eq!(repeated[0].type_.as_deref(), Some("Warning"));
    for (name, note) in [("a", "still none"), ("b", "no pollers yet")] {
        let once = about(name, note);
        assert_eq!(once.len(), 1, "{name}: {note}: {listed:?}");
        assert!(
            once[0].series.is_none(),
            "{name}: {note} was published once"
        );
    }
    assert_eq!(
        listed.len(),
        3,
        "{:?}",
        listed.iter().map(|e| e.name_any()).collect::<Vec<_>>()
    );
    Ok(())
}
