//! Leader election with a `coordination.k8s.io/v1` Lease, the way client-go does it: the
//! holder renews every `retry_period`; a candidate takes the Lease once it has seen the same
//! record, unrenewed, for `lease_duration` by its own clock (never by comparing clocks across
//! machines); every write is a compare-and-swap on the resourceVersion. A holder that could not
//! renew for `renew_deadline` (shorter than `lease_duration`) gives up before anyone else may
//! take over, so two replicas never lead at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// How to campaign.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// Unique per replica (pod name plus a random suffix).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// Defaults giving a failover under 15 s after a leader dies without releasing.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(10),
            renew_deadline: Duration::from_secs(7),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One replica's view of the Lease.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The last record seen (holder, renew time, resourceVersion) and when it was first seen.
    observed: Option<(String, Instant)>,
}

/// The outcome of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Holding,
    HeldByOther(String),
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl Elector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        let mut last_holder = String::new();
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Holding) => {
                    tracing::info!(
                        lease = self.config.name,
                        namespace = self.config.namespace,
                        identity = self.config.identity,
                        "became leader"
                    );
                    return;
                }
                Ok(Attempt::HeldByOther(holder)) => {
                    if holder != last_holder {
                        tracing::info!(holder, "standing by: another replica leads");
                        last_holder = holder;
                    }
                }
                Err(e) => tracing::warn!("leader election: {e}"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Keeps renewing; returns when leadership is lost (another holder, or no successful
    /// renewal within `renew_deadline`).
    pub async fn hold(&mut self) {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let attempt = tokio::time::timeout(
                self.config.renew_deadline.saturating_sub(renewed.elapsed()),
                self.try_acquire_or_renew(),
            )
            .await;
            match attempt {
                Ok(Ok(Attempt::Holding)) => renewed = Instant::now(),
                Ok(Ok(Attempt::HeldByOther(holder))) => {
                    tracing::warn!(holder, "lost the lease to another replica");
                    return;
                }
                Ok(Err(e)) => tracing::warn!("renewing the lease: {e}"),
                Err(_) => {}
            }
            if renewed.elapsed() >= self.config.renew_deadline {
                tracing::warn!(
                    "could not renew the lease within {:?}; stepping down",
                    self.config.renew_deadline
                );
                return;
            }
        }
    }

    /// Gives the Lease up so a standby takes over at once (on shutdown).
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("released the lease"),
            Err(e) => tracing::warn!("releasing the lease: {e}"),
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let me = self.config.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.clone()),
                    lease_duration_seconds: Some(secs(self.config.lease_duration)),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Holding),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldByOther(
                    "(just created by another replica)".into(),
                )),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = format!("{holder}/{}", lease.resource_version().unwrap_or_default());
        let first_seen = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((record, at));
                at
            }
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.config.lease_duration);
        let expired = first_seen.elapsed() >= duration;
        if !holder.is_empty() && holder != me && !expired {
            return Ok(Attempt::HeldByOther(holder));
        }
        let taking_over = holder != me;
        let spec = lease.spec.get_or_insert_with(Default::default);
        if taking_over {
            spec.holder_identity = Some(me);
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(secs(self.config.lease_duration));
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Holding),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Ok(Attempt::HeldByOther("(changed concurrently)".into()))
            }
            Err(e) => Err(e),
        }
    }
}
