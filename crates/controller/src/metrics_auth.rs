//! Who may read `/metrics`, when it is protected (`--metrics-auth`): the caller's bearer token
//! is checked with the apiserver, as controller-runtime's authenticated metrics (TWC's) and
//! kube-rbac-proxy check it. A `TokenReview` says who the token belongs to, and a
//! `SubjectAccessReview` whether that user may `get` the non-resource URL `/metrics` (granted by
//! a ClusterRole rule `nonResourceURLs: ["/metrics"], verbs: ["get"]`, as the chart's
//! `<release>-metrics-reader`). Allowing answers are remembered for a minute per token (refusals for 5 s) (by its SHA-256,
//! never the token itself), so a scrape every few seconds costs the apiserver two reviews a
//! minute per scraper. Tokens are never logged.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

/// How long an allowing answer is reused for the same token.
const REMEMBER: Duration = Duration::from_secs(60);
/// How long a refusal is: short, so a scraper granted the right is served soon.
const REMEMBER_REFUSAL: Duration = Duration::from_secs(5);
/// At most this many tokens are remembered (the oldest answers go first).
const MAX_REMEMBERED: usize = 1024;

/// The verdict on a request to `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No token, or one the apiserver does not know (401).
    Unauthenticated,
    /// A known user without the right (403), named.
    Forbidden(String),
}

fn lifetime(v: &Verdict) -> Duration {
    match v {
        Verdict::Allowed => REMEMBER,
        _ => REMEMBER_REFUSAL,
    }
}

/// Checks callers of `/metrics` against the apiserver.
pub struct MetricsAuth {
    client: Client,
    remembered: Mutex<HashMap<[u8; 32], (Instant, Verdict)>>,
}

impl MetricsAuth {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            remembered: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for the `Authorization` header's value (`Bearer <token>`), if any.
    pub async fn check(&self, authorization: Option<&str>) -> Result<Verdict, kube::Error> {
        let Some(token) = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Ok(Verdict::Unauthenticated);
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(v) = self.recall(&key) {
            return Ok(v);
        }
        let verdict = self.review(token).await?;
        self.remember(key, verdict.clone());
        Ok(verdict)
    }

    fn recall(&self, key: &[u8; 32]) -> Option<Verdict> {
        let remembered = self.remembered.lock().ok()?;
        let (at, v) = remembered.get(key)?;
        (at.elapsed() < lifetime(v)).then(|| v.clone())
    }

    fn remember(&self, key: [u8; 32], verdict: Verdict) {
        let Ok(mut remembered) = self.remembered.lock() else {
            return;
        };
        remembered.retain(|_, (at, v)| at.elapsed() < lifetime(v));
        if remembered.len() >= MAX_REMEMBERED
            && let Some(oldest) = remembered
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| *k)
        {
            remembered.remove(&oldest);
        }
        remembered.insert(key, (Instant::now(), verdict));
    }

    /// Asks the apiserver (never logs the token).
    async fn review(&self, token: &str) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?
            .status
            .unwrap_or_default();
        let user = match (reviewed.authenticated, reviewed.user) {
            (Some(true), Some(user)) => user,
            _ => return Ok(Verdict::Unauthenticated),
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let allowed = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?
            .status
            .is_some_and(|s| s.allowed);
        Ok(if allowed {
            Verdict::Allowed
        } else {
            Verdict::Forbidden(user.username.unwrap_or_default())
        })
    }
}
