//! `twc status` and the rollout controls (`twc pause|resume|promote|abort|retry`): the view a
//! person uses, and the annotations they set, from the WorkerDeployments' status and events.
//! Rendering is pure (tested below); the IO is in [`show`] and [`control`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use twc_api::{RolloutStrategyKind, VersionStatus, WorkerDeployment, controls};

mod detail;
pub use detail::detail;

/// A rollout control, as a subcommand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    Promote,
    Abort,
    Retry,
}

/// What `control` writes: (annotation, value; None removes it).
pub fn annotation(
    control: Control,
    wd: &WorkerDeployment,
    now: SystemTime,
) -> anyhow::Result<(&'static str, Option<String>)> {
    let stamp = || rfc3339(now);
    Ok(match control {
        Control::Pause => (controls::PAUSED, Some("true".into())),
        Control::Resume => (controls::PAUSED, None),
        Control::Promote => {
            let target = wd
                .status
                .as_ref()
                .and_then(|s| s.target_version.as_ref())
                .map(|t| t.base.build_id.clone())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "{} has no target version yet: nothing to promote",
                        wd.name_any()
                    )
                })?;
            (controls::PROMOTE, Some(target))
        }
        Control::Abort => (controls::ABORT, Some(stamp())),
        Control::Retry => (controls::RETRY, Some(stamp())),
    })
}

fn rfc3339(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| {
            t.round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or(t)
                .to_string()
        })
        .unwrap_or_default()
}

/// Sets the control's annotation on `namespace/name`; returns what it did, for people.
pub async fn control(
    client: Client,
    namespace: &str,
    name: &str,
    control: Control,
) -> anyhow::Result<String> {
    let api: Api<WorkerDeployment> = Api::namespaced(client, namespace);
    let wd = api
        .get(name)
        .await
        .map_err(|e| anyhow::anyhow!("WorkerDeployment {namespace}/{name}: {e}"))?;
    let (key, value) = annotation(control, &wd, SystemTime::now())?;
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| anyhow::anyhow!("annotating {namespace}/{name}: {e}"))?;
    Ok(match value {
        Some(v) => format!(
            "{namespace}/{name}: {key}={v}; the controller acknowledges it in status.controls and an event"
        ),
        None => format!("{namespace}/{name}: removed {key}"),
    })
}

/// Prints the status of one WorkerDeployment (with its last events), or one line per
/// WorkerDeployment; again every 2 s with `watch`.
pub async fn show(
    client: Client,
    namespace: Option<&str>,
    name: Option<&str>,
    watch: bool,
) -> anyhow::Result<()> {
    loop {
        let text = match name {
            Some(name) => {
                let ns = namespace.unwrap_or("default");
                let wd = Api::<WorkerDeployment>::namespaced(client.clone(), ns)
                    .get(name)
                    .await
                    .map_err(|e| anyhow::anyhow!("WorkerDeployment {ns}/{name}: {e}"))?;
                let events = Api::<Event>::namespaced(client.clone(), ns)
                    .list(&ListParams::default().fields(&format!("regarding.name={name}")))
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                let open = open_workflows(&client, &wd).await;
                detail(&wd, &events, &open, SystemTime::now())
            }
            None => {
                let api: Api<WorkerDeployment> = match namespace {
                    Some(ns) => Api::namespaced(client.clone(), ns),
                    None => Api::all(client.clone()),
                };
                let wds = api.list(&ListParams::default()).await?.items;
                table(&wds, namespace.is_none(), SystemTime::now())
            }
        };
        if !watch {
            print!("{text}");
            return Ok(());
        }
        // Clear the screen, then draw.
        print!("\u{1b}[2J\u{1b}[H{text}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// How long counting the open workflows may take before the view is drawn without them.
const COUNT_TIMEOUT: Duration = Duration::from_secs(5);

/// The workflows still running on each version of `wd` (by build ID), counted by Temporal's
/// visibility through `wd`'s own connection; the credential Secret is read from `wd`'s
/// namespace with the caller's own rights, as the controller would. Why not, if they cannot
/// be counted.
pub async fn open_workflows(
    client: &Client,
    wd: &WorkerDeployment,
) -> Result<BTreeMap<String, i64>, String> {
    match tokio::time::timeout(COUNT_TIMEOUT, count_open(client, wd)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "Temporal did not answer within {}s",
            COUNT_TIMEOUT.as_secs()
        )),
    }
}

async fn count_open(
    client: &Client,
    wd: &WorkerDeployment,
) -> Result<BTreeMap<String, i64>, String> {
    use twc_api::{ClusterConnection, Connection, ConnectionKind};
    use twc_controller::connections::{self, ConnKey};
    use twc_controller::temporal::WorkerDeploymentRef;
    use twc_controller::temporal::pool::ClientPool;

    let ns = wd.namespace().unwrap_or_default();
    let key = ConnKey::of(wd).ok_or("the WorkerDeployment has no usable connectionRef")?;
    let spec = match key.kind {
        ConnectionKind::Connection => Api::<Connection>::namespaced(client.clone(), &ns)
            .get(&key.name)
            .await
            .map(|c| c.spec)
            .map_err(|e| format!("Connection {ns}/{}: {e}", key.name))?,
        ConnectionKind::ClusterConnection => {
            let cc = Api::<ClusterConnection>::all(client.clone())
                .get(&key.name)
                .await
                .map_err(|e| format!("ClusterConnection {}: {e}", key.name))?;
            // What the controller may not dial for this WorkerDeployment, twc does not either.
            let labels = match cc.spec.sharing.uses_labels() {
                true => Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                    .get(&ns)
                    .await
                    .ok()
                    .map(|n| n.labels().clone()),
                false => None,
            };
            let temporal_ns = &wd.spec.worker_options.temporal_namespace;
            match cc.spec.sharing.judge(&ns, labels.as_ref(), temporal_ns) {
                twc_api::sharing::Verdict::Allowed => cc.spec.connection,
                twc_api::sharing::Verdict::Refused(why)
                | twc_api::sharing::Verdict::Unknown(why) => {
                    return Err(format!(
                        "ClusterConnection {} does not allow it: {why}",
                        key.name
                    ));
                }
            }
        }
    };
    let temporal_ns = &wd.spec.worker_options.temporal_namespace;
    let pool = ClientPool::new("twc-status");
    let no_cache = twc_controller::scoped::Scoped::new(Vec::new());
    let (conn, _) = connections::temporal_client(client, &pool, &no_cache, &spec, &ns, temporal_ns)
        .await
        .map_err(|e| e.to_string())?;
    let name = twc_controller::plan::build_id::temporal_deployment_name(&ns, &wd.name_any());
    let deployment = WorkerDeploymentRef {
        conn: &conn,
        namespace: temporal_ns,
        name: &name,
        identity: "twc-status",
    };
    let status = wd.status.clone().unwrap_or_default();
    let builds = status
        .target_version
        .iter()
        .map(|t| &t.base)
        .chain(status.current_version.iter().map(|c| &c.base))
        .chain(status.deprecated_versions.iter().map(|d| &d.base))
        .map(|b| b.build_id.clone());
    let mut open = BTreeMap::new();
    for build in builds {
        if open.contains_key(&build) {
            continue;
        }
        let n = deployment
            .open_on(&build)
            .await
            .map_err(|s| format!("CountWorkflowExecutions: {}", s.message()))?;
        open.insert(build, n);
    }
    Ok(open)
}

/// Where a Progressive rollout is: (step index, steps, time left in the step).
pub fn step(wd: &WorkerDeployment, now: SystemTime) -> Option<(usize, usize, Duration)> {
    let steps = &wd.spec.rollout.steps;
    if wd.spec.rollout.strategy != RolloutStrategyKind::Progressive || steps.is_empty() {
        return None;
    }
    let target = wd.status.as_ref()?.target_version.as_ref()?;
    if target.base.status != VersionStatus::Ramping {
        return None;
    }
    let ramp = target.ramp_percentage?;
    let index = steps
        .iter()
        .rposition(|s| s.ramp_percentage as f32 <= ramp)
        .unwrap_or(0);
    let pause = twc_api::duration::parse(&steps[index].pause_duration).ok()?;
    let since = target
        .ramp_last_modified_at
        .as_ref()
        .map(|t| SystemTime::from(t.0))?;
    let gone = now.duration_since(since).unwrap_or_default();
    Some((index, steps.len(), pause.saturating_sub(gone)))
}

/// "1h2m", "5m3s", "42s".
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

fn condition<'a>(wd: &'a WorkerDeployment, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    wd.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// What a WorkerDeployment is doing, in a word: the Progressing reason while it progresses,
/// else the Ready reason; a failed build's reason first.
fn state(wd: &WorkerDeployment) -> String {
    let status = wd.status.clone().unwrap_or_default();
    if let Some(f) = &status.failed_version {
        return f.reason.clone();
    }
    match (condition(wd, "Progressing"), condition(wd, "Ready")) {
        (Some(("True", reason, _)), _) => reason.to_string(),
        (Some((_, reason, _)), _) if reason == twc_api::conditions::PAUSED => reason.to_string(),
        (_, Some((_, reason, _))) => reason.to_string(),
        _ => "Unknown".into(),
    }
}

/// One line per WorkerDeployment.
pub fn table(wds: &[WorkerDeployment], with_namespace: bool, now: SystemTime) -> String {
    let mut rows = vec![vec![
        "NAME".to_string(),
        "TARGET".into(),
        "CURRENT".into(),
        "RAMP".into(),
        "STEP".into(),
        "STATE".into(),
    ]];
    for wd in wds {
        let status = wd.status.clone().unwrap_or_default();
        let target = status.target_version.as_ref();
        let name = if with_namespace {
            format!("{}/{}", wd.namespace().unwrap_or_default(), wd.name_any())
        } else {
            wd.name_any()
        };
        rows.push(vec![
            name,
            target
                .map(|t| t.base.build_id.clone())
                .unwrap_or_else(|| "-".into()),
            status
                .current_version
                .as_ref()
                .map(|c| c.base.build_id.clone())
                .unwrap_or_else(|| "-".into()),
            target
                .and_then(|t| t.ramp_percentage)
                .filter(|_| target.is_some_and(|t| t.base.status == VersionStatus::Ramping))
                .map(|r| format!("{r}%"))
                .unwrap_or_else(|| "-".into()),
            step(wd, now)
                .map(|(i, n, left)| format!("{}/{n} {} left", i + 1, short(left)))
                .unwrap_or_else(|| "-".into()),
            state(wd),
        ]);
    }
    columns(&rows)
}

fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn ramping() -> WorkerDeployment {
        serde_json::from_value(json!({
            "apiVersion": "temporal.io/v1alpha1", "kind": "WorkerDeployment",
            "metadata": {"name": "hello", "namespace": "team-a"},
            "spec": {
                "template": {"spec": {"containers": [{"name": "w", "image": "w:2"}]}},
                "rollout": {"strategy": "Progressive", "steps": [
                    {"rampPercentage": 10, "pauseDuration": "5m"},
                    {"rampPercentage": 50, "pauseDuration": "10m"}
                ]},
                "workerOptions": {"connectionRef": {"name": "c"}, "temporalNamespace": "default"}
            },
            "status": {
                "targetVersion": {"buildID": "v2-aaaa", "status": "Ramping", "rampPercentage": 10.0,
                    "rampLastModifiedAt": "2027-01-15T07:58:20Z", "targetSince": "2027-01-15T07:50:00Z"},
                "currentVersion": {"buildID": "v1-bbbb", "status": "Current"},
                "conditions": [{"type": "Progressing", "status": "True", "reason": "Ramping",
                    "message": "buildID v2-aaaa is ramping at 10%", "lastTransitionTime": "2027-01-15T07:58:20Z"}]
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_step_and_its_time_left_come_from_the_ramp_time() {
        // now is 08:00:00; the step of 5 m started at 07:58:20.
        assert_eq!(
            step(&ramping(), now()),
            Some((0, 2, Duration::from_secs(200)))
        );
        let table = table(&[ramping()], false, now());
        let line = table.lines().nth(1).unwrap_or_default();
        for word in [
            "hello",
            "v2-aaaa",
            "v1-bbbb",
            "10%",
            "1/2 3m20s left",
            "Ramping",
        ] {
            assert!(line.contains(word), "{word} missing in {line:?}");
        }
    }

    /// A version with worker groups shows each group's Deployment.
    #[test]
    fn the_detail_names_every_groups_deployment() {
        let mut wd = ramping();
        if let Some(c) = wd.status.as_mut().and_then(|s| s.current_version.as_mut()) {
            c.base.worker_groups = serde_json::from_value(json!([
                {"name": "activities", "deployment": {"name": "hello-activities-v1-bbbb-1234abcd"}},
                {"name": "workflows", "deployment": {"name": "hello-workflows-v1-bbbb-5678abcd"}}
            ]))
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let text = detail(&wd, &[], &Ok(Default::default()), now());
        assert!(
            text.contains("hello-activities-v1-bbbb-1234abcd,hello-workflows-v1-bbbb-5678abcd"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_connection_is_what_the_line_and_the_detail_say() {
        let mut wd = ramping();
        let why = "ClusterConnection prod does not allow WorkerDeployment team-a/hello: namespace team-a does not match spec.allowedNamespaces.selector (tier=prod); its running versions are left as they are";
        if let Some(s) = wd.status.as_mut() {
            s.conditions = ["Ready", "Progressing"]
                .into_iter()
                .map(|t| {
                    serde_json::from_value(json!({"type": t, "status": "False",
                        "reason": "ConnectionNotAllowed", "message": why,
                        "lastTransitionTime": "2027-01-15T07:58:20Z"}))
                    .unwrap_or_else(|e| panic!("{e}"))
                })
                .collect();
        }
        let line = table(&[wd.clone()], false, now());
        assert!(line.contains("ConnectionNotAllowed"), "{line}");
        let refused = Err("ClusterConnection prod does not allow it".to_string());
        let text = detail(&wd, &[], &refused, now());
        assert!(text.contains(why), "{text}");
    }

    #[test]
    fn the_detail_shows_the_last_rollouts_phases_since_the_spec_was_seen() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let at = |ms: i64| {
            k8s_openapi::jiff::Timestamp::from_millisecond(1_800_000_000_000 + ms)
                .ok()
                .map(MicroTime)
        };
        let mut wd = ramping();
        if let Some(s) = wd.status.as_mut() {
            s.last_rollout = Some(twc_api::RolloutTimeline {
                build_id: "v2-aaaa".into(),
                previous_build_id: Some("v1-bbbb".into()),
                spec_seen: at(0),
                deployment_written: at(4),
                pods_ready: at(612),
                promoted: at(879),
                ..Default::default()
            });
        }
        let text = detail(&wd, &[], &Ok(BTreeMap::new()), now());
        for line in [
            "Last rollout: v2-aaaa (from v1-bbbb)",
            "  spec seen            2027-01-15T08:00:00.000Z",
            "  Deployment written   +0.004 s (+0.004 s)",
            "  pods ready           +0.612 s (+0.608 s)",
            "  promoted             +0.879 s (+0.267 s)",
        ] {
            assert!(text.contains(line), "{line:?} in {text}");
        }
        // Phases not reached are left out.
        assert!(!text.contains("first poller"), "{text}");
    }

    #[test]
    fn a_failed_build_is_what_the_line_and_the_detail_say_first() {
        let mut wd = ramping();
        if let Some(s) = wd.status.as_mut() {
            s.failed_version = Some(twc_api::FailedVersion {
                build_id: "v2-aaaa".into(),
                reason: "WorkersCrashLooping".into(),
                message: "the workers keep crashing".into(),
                failed_at: None,
                rolled_back: true,
            });
        }
        assert!(table(&[wd.clone()], true, now()).contains("team-a/hello"));
        assert!(table(&[wd.clone()], true, now()).contains("WorkersCrashLooping"));
        if let Some(t) = wd.status.as_mut().and_then(|s| s.target_version.as_mut()) {
            t.analysis = vec![twc_api::StepAnalysis {
                step: 0,
                ramp_percentage: 10,
                closed: 12,
                failed: 6,
                failed_percent: 50,
                verdict: twc_api::AnalysisVerdict::Failed,
                checked_at: None,
            }];
        }
        let open: BTreeMap<String, i64> = [("v2-aaaa".to_string(), 3), ("v1-bbbb".to_string(), 40)]
            .into_iter()
            .collect();
        let text = detail(&wd, &[], &Ok(open), now());
        assert!(
            text.contains("  step 1 at 10%: Failed (6 of 12 closed failed, 50%)"),
            "{text}"
        );
        let row = |build: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(build))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(row("v2-aaaa").last(), Some(&"3"), "{text}");
        assert_eq!(row("v1-bbbb").last(), Some(&"40"), "{text}");
        // Not counted: said once, with why, and no number is made up.
        let text = detail(
            &wd,
            &[],
            &Err("Connection team-a/c: not found".into()),
            now(),
        );
        assert!(
            text.contains("(open workflows not counted: Connection team-a/c: not found)"),
            "{text}"
        );
        assert!(!text.contains(" 40"), "{text}");
        assert!(
            text.contains(
                "Failed:    v2-aaaa WorkersCrashLooping, rolled back: the workers keep crashing"
            ),
            "{text}"
        );
        assert!(
            text.contains("step 1 of 2, 3m20s left, target for 10m0s"),
            "{text}"
        );
    }

    #[test]
    fn controls_write_their_annotations() {
        let wd = ramping();
        assert_eq!(
            annotation(Control::Promote, &wd, now()).ok(),
            Some((controls::PROMOTE, Some("v2-aaaa".to_string())))
        );
        assert_eq!(
            annotation(Control::Resume, &wd, now()).ok(),
            Some((controls::PAUSED, None))
        );
        assert_eq!(
            annotation(Control::Abort, &wd, now()).ok(),
            Some((controls::ABORT, Some("2027-01-15T08:00:00Z".to_string())))
        );
        let mut fresh = wd;
        fresh.status = None;
        assert!(annotation(Control::Promote, &fresh, now()).is_err());
    }
}
