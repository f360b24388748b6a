//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` package does it, so kubeforge replicas and Go replicas
//! read each other's Leases.
//!
//! A candidate tries to acquire the Lease every `retry_period` (jittered).
//! The Lease is free when it does not exist, names no holder, or its holder
//! has not renewed it for `leaseDurationSeconds` — measured on the local
//! clock from when this candidate last saw the record change, so clock skew
//! between machines does not matter. Writes carry the Lease's
//! `resourceVersion`, so two candidates can never both win (the loser gets a
//! 409). The leader renews every `retry_period`; if it cannot renew within
//! `renew_deadline` it has lost the lease and must stop working.
//! `acquireTime`, `renewTime`, `leaseTransitions` and `holderIdentity` are
//! written as client-go writes them; on release (opt-in) the holder is
//! emptied and the duration set to 1 s so a follower takes over at once.

use crate::api_errors::{is_already_exists, is_conflict};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use crate::metrics::Metrics;
use tokio_util::sync::CancellationToken;

/// Leader election settings (controller-runtime's defaults: 15 s lease,
/// 10 s renew deadline, 2 s retry period, no release on shutdown).
#[derive(Clone, Debug)]
pub struct LeaderElection {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) identity: String,
    pub(crate) lease_duration: Duration,
    pub(crate) renew_deadline: Duration,
    pub(crate) retry_period: Duration,
    pub(crate) release_on_cancel: bool,
}

impl LeaderElection {
    /// Elect a leader on Lease `namespace/name`. The identity defaults to
    /// `<hostname>_<uuid>`, as controller-runtime's.
    pub fn new(name: &str, namespace: &str) -> LeaderElection {
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "localhost".to_string());
        LeaderElection {
            name: name.to_string(),
            namespace: namespace.to_string(),
            identity: format!("{host}_{}", uuid::Uuid::new_v4()),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: false,
        }
    }

    /// This candidate's `holderIdentity` (unique per replica).
    #[must_use]
    pub fn identity(mut self, identity: &str) -> Self {
        self.identity = identity.to_string();
        self
    }

    /// How long a Lease stays valid without renewal (whole seconds on the
    /// wire, at least 1).
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = d;
        self
    }

    /// How long the leader keeps retrying a failed renewal before it gives up
    /// leadership.
    #[must_use]
    pub fn renew_deadline(mut self, d: Duration) -> Self {
        self.renew_deadline = d;
        self
    }

    /// How often candidates try to acquire and the leader renews.
    #[must_use]
    pub fn retry_period(mut self, d: Duration) -> Self {
        self.retry_period = d;
        self
    }

    /// Release the Lease when the manager shuts down gracefully, so another
    /// replica takes over at once instead of after the lease duration.
    #[must_use]
    pub fn release_on_cancel(mut self, on: bool) -> Self {
        self.release_on_cancel = on;
        self
    }

    /// The Lease's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This candidate's identity.
    pub fn holder_identity(&self) -> &str {
        &self.identity
    }

    /// client-go's checks: lease duration > renew deadline > 1.2 × retry.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::LeaderElectionConfig(m.to_string()));
        if self.name.is_empty() || self.namespace.is_empty() {
            return bad("the Lease needs a name and a namespace");
        }
        if self.identity.is_empty() {
            return bad("the identity must not be empty");
        }
        if self.lease_duration <= self.renew_deadline {
            return bad("lease duration must be greater than the renew deadline");
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER) {
            return bad("renew deadline must be greater than 1.2 × the retry period");
        }
        if self.retry_period.is_zero() {
            return bad("retry period must be positive");
        }
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        let secs = self.lease_duration.as_secs_f64().ceil().max(1.0);
        if secs > f64::from(i32::MAX) {
            i32::MAX
        } else {
            secs as i32
        }
    }
}

const JITTER: f64 = 1.2;

/// Where a candidate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaderState {
    /// Not (yet) leading.
    Following,
    /// Holding the Lease.
    Leading,
    /// Was leading and failed to renew in time.
    Lost,
}

/// A random duration in `[d, d × (1 + JITTER))`, as `wait.JitterUntil`.
fn jittered(d: Duration) -> Duration {
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let frac = (r % 1_000_000) as f64 / 1_000_000.0;
    d + d.mul_f64(JITTER * frac)
}

/// One candidate.
pub(crate) struct Elector {
    config: LeaderElection,
    api: Api<Lease>,
    /// The Lease spec last seen and when (local clock) it was first seen.
    observed: Option<(LeaseSpec, Instant)>,
}

impl Elector {
    pub(crate) fn new(config: LeaderElection, client: Client) -> Elector {
        let api = Api::namespaced(client, &config.namespace);
        Elector {
            config,
            api,
            observed: None,
        }
    }

    fn observe(&mut self, spec: &LeaseSpec) {
        if self.observed.as_ref().map(|(s, _)| s) != Some(spec) {
            self.observed = Some((spec.clone(), Instant::now()));
        }
    }

    /// One attempt, as client-go's `tryAcquireOrRenew`: `Ok(true)` when this
    /// candidate holds the Lease afterwards.
    pub(crate) async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let me = self.config.identity.clone();
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let spec = LeaseSpec {
                holder_identity: Some(me),
                lease_duration_seconds: Some(self.config.lease_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created.spec.unwrap_or_default());
                    Ok(true)
                }
                // Another candidate created it first.
                Err(e) if is_already_exists(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(&spec);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == me;
        let seen_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, t)| *t);
        let valid_for = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        );
        if !holder.is_empty() && !mine && seen_at + valid_for > Instant::now() {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = LeaseSpec {
            holder_identity: Some(me),
            lease_duration_seconds: Some(self.config.lease_seconds()),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if mine {
                transitions
            } else {
                transitions.saturating_add(1)
            }),
            ..spec
        };
        let mut updated = lease;
        updated.spec = Some(new_spec);
        // `updated` keeps the resourceVersion read above: a concurrent
        // writer makes this a 409, never a lost update.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &updated)
            .await
        {
            Ok(l) => {
                self.observe(&l.spec.unwrap_or_default());
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give the Lease up if this candidate holds it (client-go's `release`).
    pub(crate) async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..spec
        });
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// Acquire, then renew until `stop` (then release if configured) or
    /// until renewal fails past the deadline (then report `Lost`).
    pub(crate) async fn run(
        mut self,
        metrics: Arc<Metrics>,
        state: watch::Sender<LeaderState>,
        stop: CancellationToken,
    ) {
        let name = self.config.name.clone();
        let retry = self.config.retry_period;
        metrics.set_leader(&name, false);
        tracing::info!(lease = %name, identity = %self.config.identity, "attempting to acquire leader lease");
        loop {
            if stop.is_cancelled() {
                return;
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(lease = %name, error = %e, "error retrieving or updating the leader lease")
                }
            }
            tokio::select! {
                () = tokio::time::sleep(jittered(retry)) => {}
                () = stop.cancelled() => return,
            }
        }
        tracing::info!(lease = %name, identity = %self.config.identity, "successfully acquired lease");
        metrics.set_leader(&name, true);
        let _ = state.send(LeaderState::Leading);
        let mut renewed = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                () = stop.cancelled() => {
                    if self.config.release_on_cancel {
                        match self.release().await {
                            Ok(()) => tracing::info!(lease = %name, "released leader lease"),
                            Err(e) => tracing::warn!(lease = %name, error = %e, "failed to release leader lease"),
                        }
                    }
                    metrics.set_leader(&name, false);
                    return;
                }
            }
            let left = self.config.renew_deadline.saturating_sub(renewed.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => renewed = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::warn!(lease = %name, "leader lease is held by another candidate")
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %name, error = %e, "failed to renew leader lease")
                }
                Err(_) => tracing::warn!(lease = %name, "renewing the leader lease timed out"),
            }
            if renewed.elapsed() >= self.config.renew_deadline {
                tracing::error!(lease = %name, "leader election lost");
                metrics.set_leader(&name, false);
                let _ = state.send(LeaderState::Lost);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_controller_runtime_s_and_validated() {
        let le = LeaderElection::new("lock", "default");
        assert_eq!(le.lease_duration, Duration::from_secs(15));
        assert_eq!(le.renew_deadline, Duration::from_secs(10));
        assert_eq!(le.retry_period, Duration::from_secs(2));
        assert!(le.validate().is_ok());
        assert!(le.identity.contains('_'));
        let bad = LeaderElection::new("lock", "default").renew_deadline(Duration::from_secs(20));
        assert!(bad.validate().is_err());
        let bad = LeaderElection::new("lock", "default").retry_period(Duration::from_secs(9));
        assert!(bad.validate().is_err());
        assert_eq!(
            LeaderElection::new("l", "d")
                .lease_duration(Duration::from_millis(1500))
                .lease_seconds(),
            2
        );
        let j = jittered(Duration::from_secs(1));
        assert!(j >= Duration::from_secs(1) && j < Duration::from_millis(2200));
    }
}
