//! Permissions lost while running. RBAC can change under a running controller (applying
//! another mode's `twc rbac` over this one's, a chart upgrade, a hand edit); the watches then
//! answer Forbidden on their next list or watch, and keep answering it on every retry. Each
//! watch reports here what it met: a Forbidden records the apiserver's own words (which name
//! the user, verb, resource and scope), the next good answer clears it. `/readyz` fails while
//! anything is lost, and a WorkerDeployment whose connection cannot be read says why.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

/// The verbs the controller's generated RBAC grants on `group`/`resource` (every mode's rules
/// together): a re-check asks for exactly these, so a resource it only reads (Secrets,
/// Namespaces) is found back once it may read it again.
fn verbs(group: &str, resource: &str) -> Vec<String> {
    let mut verbs: Vec<String> = crate::rbac::namespaced_rules()
        .into_iter()
        .chain(crate::rbac::cluster_scoped_rules())
        .filter(|r| {
            r.api_groups
                .as_ref()
                .is_some_and(|g| g.iter().any(|g| g == group))
                && r.resources
                    .as_ref()
                    .is_some_and(|rs| rs.iter().any(|r| r == resource))
        })
        .flat_map(|r| r.verbs)
        .collect();
    verbs.sort();
    verbs.dedup();
    verbs
}

/// A resource, in a namespace or (`None`) across all of them.
type Key = (&'static str, Option<String>);

/// What was lost: the resource's API group and the apiserver's message.
type Loss = (&'static str, String);

/// Resources the controller met Forbidden on, until a re-check finds them allowed again.
/// Cheap to clone; clones share the record.
#[derive(Clone, Default)]
pub struct Access {
    lost: Arc<Mutex<BTreeMap<Key, Loss>>>,
}

/// The apiserver's message if `e` is a Forbidden answer.
pub fn forbidden_message(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if s.code == 403 => Some(s.message.clone()),
        _ => None,
    }
}

/// The apiserver's message if a watch met a Forbidden answer.
pub fn watch_forbidden(e: &watcher::Error) -> Option<String> {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => forbidden_message(e),
        watcher::Error::WatchError(s) => (s.code == 403).then(|| s.message.clone()),
        _ => None,
    }
}

impl Access {
    /// Records a watch of `group`/`resource` in `scope` answering Forbidden (anything else
    /// it meets says nothing about permissions).
    pub fn saw<K>(
        &self,
        group: &'static str,
        resource: &'static str,
        scope: Option<&str>,
        item: &Result<watcher::Event<K>, watcher::Error>,
    ) {
        if let Err(e) = item
            && let Some(message) = watch_forbidden(e)
        {
            self.forbidden(group, resource, scope, message);
        }
    }

    /// Records a Forbidden answer about `group`/`resource` in `namespace` (`None`: all).
    pub fn forbidden(
        &self,
        group: &'static str,
        resource: &'static str,
        namespace: Option<&str>,
        message: String,
    ) {
        let Ok(mut lost) = self.lost.lock() else {
            return;
        };
        let key = (resource, namespace.map(str::to_string));
        if lost.get(&key).map(|(_, m)| m) != Some(&message) {
            tracing::warn!(
                resource,
                "lost a permission on {resource}: {message}; re-apply the controller's RBAC (`twc rbac`, or the chart's)"
            );
        }
        lost.insert(key, (group, message));
    }

    /// The apiserver's Forbidden message about `resource`, while it is lost anywhere.
    pub fn lost(&self, resource: &str) -> Option<String> {
        let lost = self.lost.lock().ok()?;
        lost.iter()
            .find(|((r, _), _)| *r == resource)
            .map(|(_, (_, m))| m.clone())
    }

    /// `Err` naming every resource lost now.
    pub fn state(&self) -> Result<(), String> {
        let lost = self.lost.lock().map(|l| l.clone()).unwrap_or_default();
        if lost.is_empty() {
            return Ok(());
        }
        let what: Vec<String> = lost
            .iter()
            .map(|((r, _), (_, m))| format!("{r} ({m})"))
            .collect();
        Err(format!(
            "RBAC: forbidden on {}; re-apply the controller's RBAC (`twc rbac`, or the chart's)",
            what.join(", ")
        ))
    }

    /// Asks the apiserver again about every lost resource; those it allows every verb on
    /// again are forgotten (a watch still failing records itself again on its next retry).
    pub async fn recheck(&self, client: &kube::Client) {
        let lost: Vec<(Key, &'static str)> = self
            .lost
            .lock()
            .map(|l| l.iter().map(|(k, (g, _))| (k.clone(), *g)).collect())
            .unwrap_or_default();
        for ((resource, namespace), group) in lost {
            let mut allowed = true;
            for verb in verbs(group, resource) {
                allowed &= may(client, group, resource, None, namespace.as_deref(), &verb)
                    .await
                    .unwrap_or(false);
            }
            // The kinds whose status it writes.
            if group == twc_api::GROUP {
                let ns = namespace.as_deref();
                allowed &= may(client, group, resource, Some("status"), ns, "patch")
                    .await
                    .unwrap_or(false);
            }
            if allowed && let Ok(mut l) = self.lost.lock() {
                l.remove(&(resource, namespace));
                tracing::info!(resource, "the permissions on {resource} are back");
            }
        }
    }

    /// [`Access::recheck`] every `every`, for as long as it runs.
    pub async fn keep_checking(self, client: kube::Client, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            self.recheck(&client).await;
        }
    }
}

/// Whether the apiserver lets this identity `verb` `group`/`resource` (or its
/// `subresource`) in `namespace` (`None`: every namespace), by SelfSubjectAccessReview.
pub async fn may(
    client: &kube::Client,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
    verb: &str,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(str::to_string),
                namespace: namespace.map(str::to_string),
                verb: Some(verb.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let review = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(review.status.is_some_and(|s| s.allowed))
}

/// Whether an error of an access review is the apiserver's answer (the review itself is
/// forbidden or refused: nothing is granted) rather than no answer (the apiserver restarting
/// or unreachable, a timeout, a 5xx or 429).
fn is_an_answer(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429 && s.code != 409)
}

/// [`may`] for every namespace, asked again (backing off to 5 s) until the apiserver answers:
/// the rights read at start decide what the controller watches for the rest of its life, so a
/// replica that started while the apiserver restarted must not run without ClusterConnections
/// because one request failed.
pub async fn may_answered(client: &kube::Client, group: &str, resource: &str, verb: &str) -> bool {
    let mut wait = Duration::from_millis(200);
    loop {
        match may(client, group, resource, None, None, verb).await {
            Ok(allowed) => return allowed,
            Err(e) if is_an_answer(&e) => {
                tracing::warn!("may not ask whether it may {verb} {resource}: {e}; taken as no");
                return false;
            }
            Err(e) => {
                tracing::warn!(
                    "could not ask the apiserver whether it may {verb} {resource} ({e}); asking again in {wait:?}"
                );
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn forbidden_error() -> watcher::Error {
        let status = Status::failure(
            "clusterconnections.temporal.io is forbidden: User \"system:serviceaccount:twc:twc\" cannot list resource \"clusterconnections\" in API group \"temporal.io\" at the cluster scope",
            "Forbidden",
        )
        .with_code(403);
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn only_a_refusal_answers_an_access_review() {
        let api = |code: u16| kube::Error::Api(Box::new(Status::failure("x", "y").with_code(code)));
        assert!(is_an_answer(&api(403)));
        assert!(is_an_answer(&api(404)));
        for code in [409, 429, 500, 503, 504] {
            assert!(!is_an_answer(&api(code)), "{code}");
        }
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert!(!is_an_answer(&kube::Error::Service(Box::new(io))));
    }

    #[test]
    fn a_forbidden_watch_is_recorded_with_the_apiservers_words() {
        let access = Access::default();
        assert_eq!(access.state(), Ok(()));
        // Other failures, and events, say nothing about permissions.
        access.saw::<()>(
            "temporal.io",
            "clusterconnections",
            None,
            &Err(watcher::Error::NoResourceVersion),
        );
        access.saw::<()>(
            "temporal.io",
            "clusterconnections",
            None,
            &Ok(watcher::Event::Init),
        );
        assert_eq!(access.state(), Ok(()));
        access.saw::<()>(
            "temporal.io",
            "clusterconnections",
            None,
            &Err(forbidden_error()),
        );
        let lost = access.lost("clusterconnections").unwrap_or_default();
        assert!(
            lost.contains("cannot list resource \"clusterconnections\""),
            "{lost}"
        );
        let state = access.state().err().unwrap_or_default();
        assert!(
            state.starts_with("RBAC: forbidden on clusterconnections ("),
            "{state}"
        );
        // Only a re-check clears it, not the next event.
        access.saw::<()>(
            "temporal.io",
            "clusterconnections",
            None,
            &Ok(watcher::Event::Init),
        );
        assert!(access.lost("clusterconnections").is_some());
    }

    /// What a re-check asks for is what the generated RBAC grants: before, it asked for
    /// `patch` on Namespaces, which no mode grants, so a Namespace watch once forbidden was
    /// never found back.
    #[test]
    fn a_recheck_asks_for_what_the_rbac_grants() {
        assert_eq!(verbs("", "namespaces"), ["get", "list", "watch"]);
        assert_eq!(verbs("", "secrets"), ["get", "list", "watch"]);
        assert_eq!(
            verbs("apps", "deployments"),
            ["create", "delete", "list", "patch", "watch"]
        );
        for resource in [
            "workerdeployments",
            "connections",
            "clusterconnections",
            "workerresourcetemplates",
        ] {
            assert_eq!(
                verbs(twc_api::GROUP, resource),
                ["list", "patch", "watch"],
                "{resource}"
            );
        }
    }
}
